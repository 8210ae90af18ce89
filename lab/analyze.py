"""Figures of one lab run, from its logs alone: the client's, nginx's and the origin's.

Definitions (the README quotes them):

- sick window: from the start of the first faulty phase to the start of the healthy phase
  after it (the heal). "While sick" selects client requests by the time they were scheduled,
  origin requests by the time they arrived.
- attempt: one try nginx made to an origin server, read from `$upstream_addr` in nginx's log
  (so refused connections count too); it starts at the request's start at nginx plus the
  `$upstream_response_time` of the attempts before it.
- time to protect: the first time T (on a 0.1 s grid, from the sick start) from which every
  0.5 s window [t, t + 0.5 s) with T <= t and t + 0.5 s <= heal holds at most `protect_level`
  x rate attempts per second to the servers the fault affects. "never" when no such T.
- breaker open at: the first status poll after the sick start that reads a state other than
  closed (module runs).
- time to recover: the first time R >= 0 after the heal (0.1 s grid) from which every 1 s
  window of scheduled client requests [heal + r, heal + r + 1 s), r >= R, up to the end of
  the run, has at least `recover_level` of its requests ending in "ok" (a fresh 2xx, after the
  client's retry if any). "never" when the last window does not.
- close->reopen: closes of the breaker during the sick window (from the status page's
  `totals.closed`) that were followed by an open before the heal.
"""

import bisect
import json
import math
import re

from labconf import seconds

ADDR = re.compile(r"^\d+\.\d+\.\d+\.\d+:(\d+)$")
OK_KINDS = ("ok",)
STALL_FLAG = 0.25  # seconds: a stall of the lab's client or origin this long flags the run


def _tsv(path):
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        return [dict(zip(head, line.rstrip("\n").split("\t"))) for line in f]


def _pct(values, q):
    if not values:
        return None
    values = sorted(values)
    idx = min(len(values) - 1, max(0, int(round(q / 100.0 * len(values) + 0.5)) - 1))
    return values[idx]


def load_client(path):
    rows = []
    for r in _tsv(path):
        rows.append(
            {
                "i": int(r["i"]),
                "k": int(r["k"]),
                "t_sched": float(r["t_sched"]),
                "t_sent": float(r["t_sent"]),
                "t_done": float(r["t_done"]),
                "status": int(r["status"]),
                "kind": r["kind"],
                "cstate": r["cstate"],
                "note": r["note"],
                "stream": r.get("stream", "-"),
            }
        )
    return rows


def load_origin(path):
    rows = []
    for r in _tsv(path):
        rows.append(
            {
                "t": float(r["t_arrival"]),
                "port": int(r["port"]),
                "rid": r["rid"],
                "path": r["path"],
                "status": int(r["status"]),
                "result": r["result"],
                "t_end": float(r["t_end"]),
            }
        )
    return rows


_LOG = re.compile(r'^(\S+) (\S+) (\d+) "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)"$')


def load_nginx(path):
    """Per logged request: its id, start, and attempts [(port, start, status)]."""
    out = []
    with open(path) as f:
        for line in f:
            m = _LOG.match(line.rstrip("\n"))
            if not m:
                continue
            msec, rtime, status, rid, addrs, ustat, utimes, cstate = m.groups()
            start = float(msec) - float(rtime)
            split = lambda s: [x.strip() for x in re.split(r",| : ", s)]  # noqa: E731
            addrs, ustat, utimes = split(addrs), split(ustat), split(utimes)
            attempts, t = [], start
            for j, a in enumerate(addrs):
                m2 = ADDR.match(a)
                dur = utimes[j] if j < len(utimes) else "-"
                if m2:
                    attempts.append((int(m2.group(1)), t, ustat[j] if j < len(ustat) else "-"))
                if dur not in ("-", ""):
                    t += float(dur)
            out.append(
                {"rid": rid, "start": start, "status": int(status), "attempts": attempts,
                 "cstate": cstate}
            )
    return out


def load_polls(path):
    polls = []
    try:
        with open(path) as f:
            for line in f:
                polls.append(json.loads(line))
    except FileNotFoundError:
        pass
    return polls


def breaker_of(poll, upstream="origin", route="default"):
    st = poll.get("status")
    if not st:
        return None
    for b in st.get("breakers", []):
        if b.get("upstream") == upstream and b.get("route") == route:
            return b
    return None


def analyze(meta, rundir):
    """All figures of a run, plus the per-second series the plot draws."""
    t0 = meta["t0"]
    s0, s1 = (t0 + meta["sick"][0], t0 + meta["sick"][1])
    end = t0 + meta["duration"]
    rate = float(meta["rate"])
    client = load_client(f"{rundir}/client.tsv")
    origin = load_origin(f"{rundir}/origin.tsv")
    nginx = load_nginx(f"{rundir}/access.log")
    polls = load_polls(f"{rundir}/polls.jsonl")
    sick_ports = set(meta["sick_ports"])
    health = meta.get("health_path", "/health")

    # Logical client requests: first try's schedule, final try's outcome.
    logical = {}
    for r in client:
        cur = logical.get(r["i"])
        if cur is None or r["k"] > cur["k"]:
            logical[r["i"]] = r
    reqs = sorted(logical.values(), key=lambda r: r["t_sched"])
    for r in reqs:
        r["latency"] = r["t_done"] - r["t_sched"]

    sick_reqs = [r for r in reqs if s0 <= r["t_sched"] < s1]
    ok_sick = sum(1 for r in sick_reqs if r["kind"] in OK_KINDS)
    stale_sick = sum(1 for r in sick_reqs if r["kind"] == "stale")
    lat_sick = [r["latency"] for r in sick_reqs]
    # Optional: successes per consecutive block of `block` sick requests (first 200, next 200...)
    block = int(meta.get("block") or 0)
    blocks = []
    if block > 0:
        for j in range(0, len(sick_reqs), block):
            part = sick_reqs[j:j + block]
            blocks.append([len(part), sum(1 for r in part if r["kind"] in OK_KINDS)])

    # Origin requests, joined to client tries by X-Request-Id "i.k".
    tries = {(r["i"], r["k"]) for r in client}
    user = [o for o in origin if not o["path"].startswith(health)]
    unjoined = 0
    per_try = {}
    for o in user:
        try:
            i, k = (int(x) for x in o["rid"].split("."))
        except ValueError:
            unjoined += 1
            continue
        if (i, k) not in tries:
            unjoined += 1
        per_try[(i, k)] = per_try.get((i, k), 0) + 1
    origin_sick = [o for o in user if s0 <= o["t"] < s1]
    origin_sick_bad = [o for o in origin_sick if o["port"] in sick_ports]
    health_reqs = [o for o in origin if o["path"].startswith(health)]
    client_gone = sum(1 for o in origin if o["result"] == "client_gone")

    # Attempts from nginx's log.
    attempts = [(a[0], a[1]) for n in nginx for a in n["attempts"]]
    attempts.sort(key=lambda a: a[1])
    att_sick = [a for a in attempts if s0 <= a[1] < s1]
    att_bad_times = sorted(a[1] for a in attempts if a[0] in sick_ports)

    # Time to protect.
    level = float(meta.get("protect_level", 0.1)) * rate
    protect = None
    win = 0.5
    starts = []
    t = s0
    while t + win <= s1 + 1e-9:
        starts.append(t)
        t += 0.1
    bad = []
    for t in starts:
        n = bisect.bisect_left(att_bad_times, t + win) - bisect.bisect_left(att_bad_times, t)
        bad.append(n / win > level)
    for idx in range(len(starts)):
        if not any(bad[idx:]):
            protect = starts[idx] - s0
            break

    # Time to recover.
    sched = [r["t_sched"] for r in reqs]
    okflag = [1 if r["kind"] in OK_KINDS else 0 for r in reqs]
    prefix = [0]
    for f in okflag:
        prefix.append(prefix[-1] + f)
    rec_level = float(meta.get("recover_level", 0.95))
    recover = None
    wins = []
    t = s1
    while t + 1.0 <= end + 1e-9:
        a, b = bisect.bisect_left(sched, t), bisect.bisect_left(sched, t + 1.0)
        good = (b > a) and (prefix[b] - prefix[a]) / (b - a) >= rec_level
        wins.append((t, good))
        t += 0.1
    for idx in range(len(wins)):
        if all(g for _, g in wins[idx:]):
            recover = wins[idx][0] - s1
            break

    # Breaker, from the polls.
    band = []  # (t, state)
    poll_errors = 0
    for p in polls:
        b = breaker_of(p)
        if b is None:
            if "error" in p:
                poll_errors += 1
            continue
        band.append((p["t"], b["state"], b.get("totals", {})))
    open_at = None
    for t, state, _ in band:
        if t >= s0 and state != "closed":
            open_at = t - s0
            break
    opened_any = any(state != "closed" for _, state, _ in band) or any(
        tot.get("opened", 0) > 0 for _, _, tot in band
    )
    # Probes (totals.probes going up), in seconds from the heal: when recovery was tried.
    probe_times = []
    for j in range(1, len(band)):
        d = band[j][2].get("probes", 0) - band[j - 1][2].get("probes", 0)
        probe_times += [round(band[j][0] - s1, 1)] * max(0, d)
    flaps, opens_sick, closes_sick = 0, 0, 0
    in_sick = [(t, tot) for t, _, tot in band if s0 <= t <= s1]
    if meta["module"] and in_sick:
        prev_before = [tot for t, _, tot in band if t < s0]
        prev = prev_before[-1] if prev_before else {"opened": 0, "closed": 0}
        pending_close = 0
        for _t, tot in in_sick:
            d_close = tot.get("closed", 0) - prev.get("closed", 0)
            d_open = tot.get("opened", 0) - prev.get("opened", 0)
            closes_sick += d_close
            opens_sick += d_open
            # a close then an open within one poll interval still counts as a cycle
            if d_open and pending_close:
                flaps += min(pending_close, d_open)
                pending_close -= min(pending_close, d_open)
            pending_close += d_close
            prev = tot

    # Servers of the pool (relative ejection): when a sick server first left the pool, the
    # servers ejected (first ejections, not a failed probe's), and the latency before and after.
    eject_at = None
    for p in polls:
        b = breaker_of(p)
        if b is None or p["t"] < s0:
            continue
        out = [s for s in b.get("servers", []) if s.get("state") != "in"
               and int(s.get("address", ":0").rsplit(":", 1)[1]) in sick_ports]
        if out:
            eject_at = p["t"] - s0
            break
    with open(f"{rundir}/error.log", errors="replace") as f:
        ejected = re.findall(r'server 127\.0\.0\.1:(\d+) ejected: (?!probe)', f.read())
    healthy_lat = [r["latency"] for r in reqs if r["t_sched"] < s0]
    after = s0 + (eject_at if eject_at is not None else (protect or 0.0)) + 1.0
    lat_after = [r["latency"] for r in sick_reqs if r["t_sched"] >= after]
    pool = {
        "eject_at_s": eject_at,
        "ejections": len(ejected),
        "false_ejections": sum(1 for port in ejected if int(port) not in sick_ports),
        "healthy_p50_ms": _ms(_pct(healthy_lat, 50)),
        "healthy_p99_ms": _ms(_pct(healthy_lat, 99)),
        "after_p99_ms": _ms(_pct(lat_after, 99)),
    }

    # Lab integrity.
    issues = []
    # Open loop: a try goes out late only when the client was starved of CPU (it then catches
    # up at once); a starved origin answers late. Either would show in the figures as if nginx
    # had done it. Stalls up to a few grid steps move a figure by as much (the table shows the
    # worst); from STALL_FLAG on they start to look like a sick origin, so they flag the run.
    lags = [r["t_sent"] - r["t_sched"] for r in client if r["k"] == 0]
    lag_max = max(lags, default=0.0)
    late = sum(1 for x in lags if x > 0.05)
    stalls = {}
    for who in ("client", "origin"):
        try:
            with open(f"{rundir}/{who}-stalls.json") as f:
                stalls[who] = [s for s in json.load(f) if t0 <= s[0] <= end]
        except FileNotFoundError:
            stalls[who] = []
        worst = max((s[1] for s in stalls[who]), default=0.0)
        if worst >= STALL_FLAG:
            n = sum(1 for s in stalls[who] if s[1] >= STALL_FLAG)
            issues.append(
                f"{who} stalled {n}x >= {STALL_FLAG * 1000:.0f} ms (max {worst * 1000:.0f} ms)"
            )
    if unjoined:
        issues.append(f"{unjoined} origin requests without a client request")
    conn = sum(1 for r in client if r["note"].startswith("conn_"))
    if conn:
        issues.append(f"{conn} client connection errors")
    expected = int(round(meta["duration"] * rate))
    if meta.get("streams"):
        # Each stream at its rate in each phase (lab/engine.py, streams_of).
        expected = 0
        for st in meta["streams"]:
            for _, a, b, fault in meta["phases"]:
                r = st.get("sick_rate", st["rate"]) if fault is not None else st["rate"]
                expected += math.ceil((b - a) * float(r) - 1e-9)
    # A sequential client sends what one request at a time allows, at most `rate` a second.
    sequential = meta.get("client_mode") == "sequential"
    if len(reqs) > expected or (len(reqs) != expected and not sequential):
        issues.append(f"{len(reqs)} client requests logged of {expected}")
    if meta["module"] and poll_errors:
        issues.append(f"{poll_errors} status polls failed")
    with open(f"{rundir}/error.log", errors="replace") as f:
        bad_lines = [ln for ln in f if re.search(r"\[(alert|crit|emerg)\]", ln)]
    if bad_lines:
        issues.append(f"{len(bad_lines)} [alert]/[crit]/[emerg] lines in error.log")

    kinds = {}
    for r in reqs:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1

    # Per-second series for the plot (by scheduled / arrival / attempt time).
    nsec = int(round(meta["duration"]))
    series = {"kinds": {}, "received": [0] * nsec, "attempts": [0] * nsec,
              "attempts_bad": [0] * nsec, "p50": [None] * nsec, "p99": [None] * nsec}
    lat_by_sec = [[] for _ in range(nsec)]
    for r in reqs:
        s = int(r["t_sched"] - t0 + 1e-6)  # request i of 20/s at exactly 25.0 s is in second 25
        if 0 <= s < nsec:
            series["kinds"].setdefault(r["kind"], [0] * nsec)[s] += 1
            lat_by_sec[s].append(r["latency"])
    for s in range(nsec):
        series["p50"][s] = _pct(lat_by_sec[s], 50)
        series["p99"][s] = _pct(lat_by_sec[s], 99)
    for o in user:
        s = int(o["t"] - t0)
        if 0 <= s < nsec:
            series["received"][s] += 1
    for port, t in attempts:
        s = int(t - t0)
        if 0 <= s < nsec:
            series["attempts"][s] += 1
            if port in sick_ports:
                series["attempts_bad"][s] += 1
    series["band"] = [(t - t0, state) for t, state, _ in band]
    series["stalls"] = [(who, s[0] - t0, s[1]) for who, lst in stalls.items() for s in lst]

    metrics = {
        "scenario": meta["scenario"],
        "variant": meta["variant"],
        "repeat": meta["repeat"],
        "rate": rate,
        "sick_s": meta["sick"],
        "client_requests": len(reqs),
        "client_tries": len(client),
        "sick_requests": len(sick_reqs),
        "sick_ok": ok_sick,
        "sick_stale": stale_sick,
        "sick_failed": len(sick_reqs) - ok_sick - stale_sick,
        "sick_ok_share": ok_sick / len(sick_reqs) if sick_reqs else None,
        "sick_blocks": blocks,
        "sick_p50_ms": _ms(_pct(lat_sick, 50)),
        "sick_p99_ms": _ms(_pct(lat_sick, 99)),
        "origin_requests": len(user),
        "origin_requests_sick": len(origin_sick),
        "origin_requests_sick_bad": len(origin_sick_bad),
        "attempts_sick": len(att_sick),
        "attempts_sick_bad": sum(1 for a in att_sick if a[0] in sick_ports),
        "max_origin_per_try": max(per_try.values(), default=0),
        "origin_client_gone": client_gone,
        "health_requests": len(health_reqs),
        "protect_s": protect,
        "protect_level_rps": level,
        "open_at_s": open_at,
        "breaker_opened": opened_any if meta["module"] else None,
        "opens_sick": opens_sick if meta["module"] else None,
        "closes_sick": closes_sick if meta["module"] else None,
        "close_reopen": flaps if meta["module"] else None,
        "probes_from_heal_s": probe_times if meta["module"] else None,
        "recover_s": recover,
        "recover_horizon_s": end - s1,
        "kinds": kinds,
        "errors": sum(v for k, v in kinds.items() if k in ("error", "timeout")),
        "statuses": _count(str(r["status"]) for r in reqs),
        "client_lag_max_ms": _ms(lag_max),
        "stalls": stalls,
        "stall_max_ms": {w: _ms(max((x[1] for x in v), default=0.0)) for w, v in stalls.items()},
        "client_late_50ms": late,
        "lab_issues": issues,
    }
    if meta.get("streams"):
        metrics["streams"] = stream_figures(meta, reqs, origin, s0, s1, end)
    if int(meta.get("servers") or 1) > 1:
        metrics["pool"] = pool
    return metrics, series


def stream_figures(meta, reqs, origin, s0, s1, end):
    """Per stream (a class of traffic, see lab/client.py): its requests, successes and
    latency (p50, p99 of its successes) healthy before the sick window, during it, in the
    first second after it and in the rest; and the origin's goodput while sick (answers
    of 200 it finished in the window, per second) against its capacity (pool model)."""
    out = {}
    spans = {
        "healthy": (float("-inf"), s0),
        "sick": (s0, s1),
        "after_1s": (s1, s1 + 1.0),
        "after": (s1 + 1.0, end),
    }
    for st in meta["streams"]:
        mine = [r for r in reqs if r.get("stream") == st["name"]]
        figs = {}
        for name, (a, b) in spans.items():
            part = [r for r in mine if a <= r["t_sched"] < b]
            ok = [r["latency"] for r in part if r["kind"] in OK_KINDS]
            figs[name] = {
                "requests": len(part),
                "ok": len(ok),
                "ok_share": len(ok) / len(part) if part else None,
                "shed": sum(1 for r in part if r["kind"].startswith("shed_")),
                "p50_ms": _ms(_pct(ok, 50)),
                "p99_ms": _ms(_pct(ok, 99)),
            }
        out[st["name"]] = figs
    served = sum(1 for o in origin if o["status"] == 200 and s0 <= o["t_end"] < s1)
    o = meta.get("settings", {}).get("origin", {})
    cap = None
    if o.get("model") == "pool" and o.get("service"):
        cap = float(o.get("pool_workers", 1)) / seconds(o["service"])
    out["origin"] = {
        "goodput_rps": served / (s1 - s0) if s1 > s0 else None,
        "capacity_rps": cap,
        "goodput_share": served / (s1 - s0) / cap if cap and s1 > s0 else None,
    }
    return out


def _ms(v):
    return None if v is None else round(v * 1000, 1)


def _count(it):
    out = {}
    for x in it:
        out[x] = out.get(x, 0) + 1
    return out


def fmt_s(v, horizon=None):
    if v is None:
        return "never" if horizon is None else f"never (> {horizon:.0f} s)"
    return f"{v:.1f} s"


__all__ = ["analyze", "fmt_s", "seconds"]
