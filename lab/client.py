"""The lab's client and status poller.

    client.py SCENARIO.json

Open loop (the default): request i is sent at T0 + i/rate whatever is still outstanding (a
slow proxy cannot slow the offered load). Sequential (`client_mode = "sequential"`): one
request at a time, request i sent when request i - 1 is done but not before T0 + i/rate (its
schedule is when it is sent), until the timeline ends: what a single user, a cron job or a
health checker sends. Each request goes on its own connection, with `X-Request-Id: i.k` (k: the client's try, 0 or 1)
so that nginx's log and the origin's log join to it. A try that fails (anything but 2xx) is
retried at once while tries are left. Each try is logged (TSV): schedule, send and end
times, status, kind and the X-Circuit-State / X-Cache-Status / Retry-After it carried.

With `streams` (a list of {name, path, segments: [[start_s, end_s, rate], ...]}), each stream
is an open loop of its own at the rate of each segment (seconds from T0), on its own path:
traffic of several classes whose rates change with the phases (a surge of one). Request ids
are unique across streams; each try's log line names its stream.

With a status URL, the breaker status JSON is polled every `poll` seconds; each answer is
kept whole (JSON lines), so new status fields are there for the report without a change here.
"""

import asyncio
import json
import time

import process
import stalls


SHED_STATES = ("open", "half_open", "recovering", "limited")


def classify(status, cstate, cache):
    """The outcome kind of one answer (see README: "Outcome kinds")."""
    if status == 0:
        return "timeout"
    if 200 <= status < 300:
        # X-Circuit-State alone says nothing here: a successful probe answers "half_open"
        return "stale" if cache in ("STALE", "UPDATING") else "ok"
    if status == 503 and cstate in SHED_STATES:
        return "shed_" + cstate
    if status == 504:
        return "timeout"
    return "error"


class Client:
    def __init__(self, spec):
        self.spec = spec
        self.host = "127.0.0.1"
        self.port = spec["port"]
        self.rate = float(spec["rate"])
        self.count = int(round(spec["duration"] * self.rate))
        self.timeout = spec["client_timeout_s"]
        self.tries = 1 + int(spec.get("client_retries", 0))
        self.sequential = spec.get("client_mode", "open") == "sequential"
        self.path = spec.get("path", "/")
        self.keys = int(spec.get("keys", 0))  # >0: cycle over this many URLs (cache scenarios)
        self.t0 = spec["t0"]
        self.streams = spec.get("streams") or []
        self.log = []
        self.polls = []
        self.stalls = []

    async def attempt(self, i, k, t_sched, stream=None):
        t_sent = time.time()
        if stream is not None:
            path = self.streams[stream]["path"]
        elif self.keys:
            path = f"{self.path}?k={i % self.keys}"
        else:
            path = self.path
        status, cstate, cache, retry_after, note = 0, "-", "-", "-", "-"
        writer = None
        try:
            async with asyncio.timeout(self.timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port)
                writer.write(
                    (
                        f"GET {path} HTTP/1.1\r\nHost: lab\r\nX-Request-Id: {i}.{k}\r\n"
                        "Connection: close\r\n\r\n"
                    ).encode()
                )
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.read()  # the body, to EOF: nginx closes after it
            lines = head.split(b"\r\n")
            status = int(lines[0].split(b" ")[1])
            for line in lines[1:]:
                key, _, val = line.partition(b":")
                key = key.strip().lower()
                val = val.strip().decode("latin-1")
                if key == b"x-circuit-state":
                    cstate = val
                elif key == b"x-cache-status":
                    cache = val
                elif key == b"retry-after":
                    retry_after = val
        except TimeoutError:
            note = "client_timeout"
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
            status, note = -1, "conn_" + type(e).__name__
        finally:
            if writer is not None:
                writer.close()
        t_done = time.time()
        kind = "error" if status == -1 else classify(status, cstate, cache)
        name = "-" if stream is None else self.streams[stream]["name"]
        self.log.append(
            (i, k, t_sched, t_sent, t_done, status, kind, cstate, cache, retry_after, note, name)
        )
        return kind

    async def request(self, i, t_sched, stream=None):
        for k in range(self.tries):
            kind = await self.attempt(i, k, t_sched, stream)
            if kind in ("ok", "stale"):
                return

    def schedule(self):
        """Every stream's requests as (time, stream), in time order."""
        out = []
        for s, st in enumerate(self.streams):
            for start, end, rate in st["segments"]:
                if rate <= 0:
                    continue
                j = 0
                while start + j / rate < end:
                    out.append((self.t0 + start + j / rate, s))
                    j += 1
        out.sort()
        return out

    async def run_streams(self, tasks):
        for i, (due, s) in enumerate(self.schedule()):
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self.request(i, due, s))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def poll(self, stop):
        url = self.spec.get("status_path")
        if not url:
            return
        interval = self.spec["poll_s"]
        req = f"GET {url} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n".encode()
        while not stop.is_set():
            t = time.time()
            writer = None
            try:
                async with asyncio.timeout(1.0):
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                    writer.write(req)
                    data = await reader.read()
                body = data.split(b"\r\n\r\n", 1)[1]
                self.polls.append({"t": t, "status": json.loads(body)})
            except (OSError, TimeoutError, ValueError, IndexError) as e:
                self.polls.append({"t": t, "error": type(e).__name__})
            finally:
                if writer is not None:
                    writer.close()
            await asyncio.sleep(max(0.0, t + interval - time.time()))

    async def main(self):
        stop = asyncio.Event()
        poller = asyncio.create_task(self.poll(stop))
        watcher = asyncio.create_task(stalls.watch(stop, self.stalls))
        tasks = set()
        i = 0
        if self.streams:
            await self.run_streams(tasks)
            i = self.count
        if self.sequential and not self.streams:
            end = self.t0 + self.count / self.rate
            while i < self.count and time.time() < end:
                due = max(self.t0 + i / self.rate, time.time())
                await asyncio.sleep(max(0.0, due - time.time()))
                await self.request(i, due)
                i += 1
        while i < self.count and not self.sequential:
            due = self.t0 + i / self.rate
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.time()
            # everything that is due goes out now, however many are outstanding
            while i < self.count and self.t0 + i / self.rate <= now:
                task = asyncio.create_task(self.request(i, self.t0 + i / self.rate))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                i += 1
        # every try is bounded by the client timeout
        if tasks:
            await asyncio.wait(tasks, timeout=self.tries * self.timeout + 2.0)
        for task in tasks:
            task.cancel()
        stop.set()
        await poller
        await watcher
        self.write()

    def write(self):
        with open(self.spec["log"], "w") as f:
            f.write(
                "i\tk\tt_sched\tt_sent\tt_done\tstatus\tkind\tcstate\tcache\tretry_after\tnote"
                "\tstream\n"
            )
            for r in self.log:
                f.write("%d\t%d\t%.6f\t%.6f\t%.6f\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n" % r)
        with open(self.spec["stalls"], "w") as f:
            json.dump(self.stalls, f)
        if self.spec.get("status_path"):
            with open(self.spec["polls"], "w") as f:
                for p in self.polls:
                    f.write(json.dumps(p) + "\n")


if __name__ == "__main__":
    process.run(Client)
