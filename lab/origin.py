"""The lab's scripted origin: one process listening on one port per upstream server.

    origin.py SCENARIO.json

It prints "ready" once every port listens, then waits for "start T0" on stdin (T0: the run's
zero, Unix seconds); until then it is healthy. From T0 it follows the spec's phases, each port
applying a phase's fault only when the fault names it in `servers` (0-based; all by default):

  mode = "refuse"   the port stops listening (connections are refused) and its open
                    connections are reset; it listens again when the phase ends
  mode = "hang"     requests are read and never answered; the origin holds each one until
                    the peer closes the connection
  add_latency       added to the service time
  latency_factor    simple model: the latency multiplied by this
  error_rate        this share of requests get `error_status` (500)
  service_factor    pool model: the service time of a job that starts in the phase is
                    multiplied by this

Models: "simple" serves every request after `latency`, all at once (with `distribution =
"exponential"`, a latency drawn for each request, exponentially distributed around it; with
`error_rate`, that share of answers fail outside any phase too). "pool" is a server with
`pool_workers` workers and a FIFO queue (shared by all ports): a job starts when a worker is
free and takes `service` (times the phase's factor); a job whose client has gone is still
worked on, as real servers do. Optional `queue_limit` answers `queue_status` (503 unless
set; 429: the origin's "too many requests") at once past that many waiting jobs.

Every request is logged (TSV, written at exit on SIGTERM): arrival, port, X-Request-Id, path,
service start and end, status (0 when none was sent) and what happened.
"""

import asyncio
import heapq
import json
import random
import signal
import sys
import time

import process
import stalls



class Origin:
    def __init__(self, spec):
        self.spec = spec
        self.ports = spec["ports"]
        o = spec["origin"]
        self.model = o.get("model", "simple")
        self.latency = o["latency_s"]
        self.pool_workers = int(o.get("pool_workers", 4))
        self.service = o.get("service_s", self.latency)
        self.queue_limit = o.get("queue_limit")
        self.queue_status = int(o.get("queue_status", 503))
        self.exponential = o.get("distribution", "fixed") == "exponential"
        self.error_rate = float(o.get("error_rate", 0.0))
        self.free_at = [0.0] * self.pool_workers  # heap: when each worker is next free
        self.waiting = []  # heap of start times of jobs not yet started
        self.rng = random.Random(spec.get("seed", 1))
        self.t0 = None
        self.phases = spec["phases"]  # [name, start_offset, end_offset, fault or None]
        self.servers = {}  # port -> asyncio server, while listening
        self.conns = {p: set() for p in self.ports}
        self.log = []
        self.inflight = {}  # id(record) -> record, for requests still open at exit
        self.stop = asyncio.Event()
        self.stalls = []

    def fault(self, port, t):
        """The fault that applies to this port at time t, or None."""
        if self.t0 is None:
            return None
        off = t - self.t0
        idx = self.ports.index(port)
        for _name, a, b, fault in self.phases:
            if a <= off < b:
                if fault is None:
                    return None
                servers = fault.get("servers")
                if servers is not None and idx not in servers:
                    return None
                return fault
        return None

    def factor(self, t):
        """Pool model: the service-time factor at time t (origin-wide)."""
        f = 1.0
        for port in self.ports:
            fault = self.fault(port, t)
            if fault is not None:
                f = max(f, float(fault.get("service_factor", 1.0)))
        return f

    def reserve(self, now):
        """Pool model: (start, end) of a job arriving now, FIFO over the earliest free worker."""
        free = heapq.heappop(self.free_at)
        start = max(now, free)
        end = start + self.service * self.factor(start)
        heapq.heappush(self.free_at, end)
        return start, end

    async def listen(self, port):
        if port in self.servers:
            return
        self.servers[port] = await asyncio.start_server(
            lambda r, w: self.handle(port, r, w),
            "127.0.0.1",
            port,
            reuse_address=True,
            backlog=4096,
        )

    async def unlisten(self, port):
        srv = self.servers.pop(port, None)
        if srv is not None:
            srv.close()
        for w in list(self.conns[port]):
            w.transport.abort()  # a dead process: its connections are reset

    async def phase_loop(self):
        """Opens and closes the listening sockets as "refuse" phases begin and end."""
        while not self.stop.is_set():
            now = time.time()
            for port in self.ports:
                fault = self.fault(port, now)
                if fault is not None and fault.get("mode") == "refuse":
                    await self.unlisten(port)
                else:
                    await self.listen(port)
            # wake at the next phase edge (or every 50 ms, cheap)
            nxt = 0.05
            if self.t0 is not None:
                edges = [self.t0 + p[1] for p in self.phases] + [self.t0 + p[2] for p in self.phases]
                future = [e - now for e in edges if e > now]
                if future:
                    nxt = min(nxt, min(future))
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=max(nxt, 0.001))
            except TimeoutError:
                pass

    async def handle(self, port, reader, writer):
        self.conns[port].add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    break
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ")
                path = parts[1].decode("latin-1") if len(parts) > 1 else "-"
                rid, close = "-", False
                for line in lines[1:]:
                    key, _, val = line.partition(b":")
                    key = key.strip().lower()
                    if key == b"x-request-id":
                        rid = val.strip().decode("latin-1") or "-"
                    elif key == b"connection" and val.strip().lower() == b"close":
                        close = True
                keep = await self.serve(port, path, rid, reader, writer)
                if not keep or close:
                    break
        finally:
            self.conns[port].discard(writer)
            writer.close()

    async def serve(self, port, path, rid, reader, writer):
        now = time.time()
        rec = [now, port, rid, path, 0.0, 0.0, 0, "pending"]
        self.inflight[id(rec)] = rec
        try:
            return await self._serve(rec, port, now, reader, writer)
        finally:
            del self.inflight[id(rec)]
            self.log.append(rec)

    async def _serve(self, rec, port, now, reader, writer):
        fault = self.fault(port, now) or {}
        if fault.get("mode") == "hang":
            rec[4] = now
            await reader.read(1)  # b"" when the peer closes; nothing else comes meanwhile
            rec[5], rec[7] = time.time(), "hung"
            return False
        if self.model == "pool":
            if self.queue_limit is not None:
                while self.waiting and self.waiting[0] <= now:
                    heapq.heappop(self.waiting)
                if len(self.waiting) >= self.queue_limit:
                    rec[4] = rec[5] = now
                    return self.respond(rec, writer, reader, self.queue_status, "queue_full")
            start, end = self.reserve(now)
            if self.queue_limit is not None:
                heapq.heappush(self.waiting, start)
            end += fault.get("add_latency_s", 0.0)
        else:
            start = now
            base = self.latency
            if self.exponential:
                base = self.rng.expovariate(1.0 / self.latency)
            base *= float(fault.get("latency_factor", 1.0))
            end = now + base + fault.get("add_latency_s", 0.0)
        rec[4], rec[5] = start, end
        delay = end - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        status = 200
        if self.rng.random() < float(fault.get("error_rate", self.error_rate)):
            status = int(fault.get("error_status", 500))
        return self.respond(rec, writer, reader, status, "served")

    def respond(self, rec, writer, reader, status, what):
        if writer.transport.is_closing() or reader.at_eof():
            rec[7] = "client_gone"  # the work was done; nobody is there to take it
            return False
        body = b"ok\n" if status == 200 else b"error\n"
        reason = {200: b"OK", 500: b"Internal Server Error", 503: b"Service Unavailable"}
        writer.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
            b"X-Origin-Port: %d\r\n\r\n%s"
            % (status, reason.get(status, b"Error"), len(body), rec[1], body)
        )
        rec[6], rec[7] = status, what
        return True

    async def control(self):
        """Reads "start T0" from stdin."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                return
            words = line.decode().split()
            if words and words[0] == "start":
                self.t0 = float(words[1])

    def write_log(self):
        with open(self.spec["stalls"], "w") as f:
            json.dump(self.stalls, f)
        with open(self.spec["log"], "w") as f:
            f.write("t_arrival\tport\trid\tpath\tt_start\tt_end\tstatus\tresult\n")
            for rec in self.log + list(self.inflight.values()):
                f.write("%.6f\t%d\t%s\t%s\t%.6f\t%.6f\t%d\t%s\n" % tuple(rec))

    async def main(self):
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        loop.add_signal_handler(signal.SIGINT, self.stop.set)
        for port in self.ports:
            await self.listen(port)
        print("ready", flush=True)
        tasks = [
            asyncio.create_task(self.phase_loop()),
            asyncio.create_task(self.control()),
            asyncio.create_task(stalls.watch(self.stop, self.stalls)),
        ]
        await self.stop.wait()
        for srv in self.servers.values():
            srv.close()
        for t in tasks:
            t.cancel()
        self.write_log()


if __name__ == "__main__":
    process.run(Origin)
