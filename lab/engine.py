"""scripts/lab: the side-by-side lab. See lab/README.md.

Each run starts a fresh origin and a fresh nginx on 127.0.0.1, drives the open-loop client
through the scenario's timeline, stops every process it started (by PID, also on failure or
Ctrl-C), then reads the three logs into figures, a timeline PNG and a row of the summary.
"""

import argparse
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time

import labconf
from analyze import analyze, fmt_s
from labconf import seconds
import nginxconf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"


class RunFailed(Exception):
    pass


NICE = 0  # set by --nice


def _child_setup():
    """preexec_fn: the child gets SIGTERM if the lab itself dies (even by SIGKILL), and runs at
    the lab's priority so that other work on the machine does not starve the client, the
    origin or nginx (all three alike)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if NICE:
        try:
            os.nice(NICE)
        except OSError:
            pass  # not root: normal priority


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_port(port, proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def alive(pid, name):
    """Still running (not a zombie), and still the program we started under that PID."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return name.encode() in f.read()
    except OSError:
        return False


class Procs:
    """Every process a run starts, stopped by PID: TERM, a grace period, then KILL."""

    def __init__(self):
        self.items = []  # (name, Popen)

    def add(self, name, proc):
        self.items.append((name, proc))
        return proc

    def stop_all(self):
        for name, proc in reversed(self.items):
            pids = [proc.pid]
            if name == "nginx":
                pids += children(proc.pid)  # workers, in case the master dies first
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.time() + 10
            while proc.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            for pid in pids:
                if alive(pid, "nginx" if name == "nginx" else "python3"):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.items = []


def streams_of(run):
    """The client's streams (see lab/client.py): each scenario stream's `rate`, or its
    `sick_rate` during the phases with a fault, as segments of the run's timeline."""
    out = []
    for st in run.get("streams") or []:
        segments = []
        for _, start, end, fault in run["phases"]:
            rate = st.get("sick_rate", st["rate"]) if fault is not None else st["rate"]
            segments.append([start, end, float(rate)])
        out.append({"name": st["name"], "path": st["path"], "segments": segments})
    return out


def one_run(doc, scenario, variant, repeat, args, outdir, module_copy):
    run = labconf.resolve(doc, scenario, variant)
    rundir = os.path.join(outdir, scenario, f"{variant}-{repeat}")
    os.makedirs(rundir, exist_ok=True)
    os.chmod(rundir, 0o755)
    nservers = int(run.get("servers", 1))
    ports = free_ports(nservers + 1)
    origin_ports, listen_port = ports[:nservers], ports[nservers]
    duration = run["phases"][-1][2]
    sick_fault = next(f for _, _, _, f in run["phases"] if f is not None)
    sick_idx = sick_fault.get("servers")
    sick_ports = [p for j, p in enumerate(origin_ports) if sick_idx is None or j in sick_idx]

    def fault_json(f):
        if f is None:
            return None
        out = dict(f)
        if "add_latency" in out:
            out["add_latency_s"] = seconds(out.pop("add_latency"))
        return out

    origin = dict(run.get("origin", {}))
    origin["latency_s"] = seconds(origin.pop("latency", "5ms"))
    if "service" in origin:
        origin["service_s"] = seconds(origin.pop("service"))
    origin_spec = {
        "ports": origin_ports,
        "origin": origin,
        "phases": [[n, a, b, fault_json(f)] for n, a, b, f in run["phases"]],
        "seed": 1000 * repeat + sum(map(ord, scenario)),
        "log": os.path.join(rundir, "origin.tsv"),
        "stalls": os.path.join(rundir, "origin-stalls.json"),
    }
    with open(os.path.join(rundir, "origin.json"), "w") as f:
        json.dump(origin_spec, f, indent=1)
    conf = nginxconf.render(run, rundir, origin_ports, listen_port, module_copy)
    with open(os.path.join(rundir, "nginx.conf"), "w") as f:
        f.write(conf)

    procs = Procs()
    try:
        errlog = open(os.path.join(rundir, "origin.stderr"), "w")
        org = procs.add(
            "origin",
            subprocess.Popen(
                [PY, os.path.join(HERE, "origin.py"), os.path.join(rundir, "origin.json")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog,
                start_new_session=True, preexec_fn=_child_setup, text=True,
            ),
        )
        ready, _, _ = select.select([org.stdout], [], [], 10)
        if not ready or org.stdout.readline().strip() != "ready":
            raise RunFailed("the origin did not start; see origin.stderr")

        ngx_err = open(os.path.join(rundir, "nginx.stderr"), "w")
        ngx = procs.add(
            "nginx",
            subprocess.Popen(
                [args.nginx, "-p", rundir + "/", "-c", os.path.join(rundir, "nginx.conf"),
                 "-e", os.path.join(rundir, "error.log")],
                stdout=ngx_err, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_child_setup,
            ),
        )
        if not wait_port(listen_port, ngx, 10):
            why = ""
            with open(os.path.join(rundir, "error.log"), errors="replace") as f:
                emerg = [ln.strip() for ln in f if "[emerg]" in ln]
            if emerg:
                why = ": " + emerg[-1].split("] ", 1)[-1]
            raise RunFailed("nginx did not start" + why)

        # Busy processes beside the run, as a shared machine has (`hogs`): each spins on a
        # core until the run ends.
        for j in range(int(run.get("hogs", 0))):
            procs.add(
                f"hog{j}",
                subprocess.Popen(
                    [PY, "-c", "while True: pass"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True,
                ),
            )
        t0 = time.time() + 0.5
        org.stdin.write(f"start {t0:.6f}\n")
        org.stdin.flush()
        client_spec = {
            "port": listen_port,
            "rate": run["rate"],
            "duration": duration,
            "client_timeout_s": seconds(run["client_timeout"]),
            "client_retries": run.get("client_retries", 0),
            "client_mode": run.get("client_mode", "open"),
            "path": run.get("path", "/"),
            "keys": (run.get("cache") or {}).get("keys", 0),
            "t0": t0,
            "status_path": nginxconf.STATUS_PATH if run["module"] else None,
            "poll_s": seconds(run.get("poll", "100ms")),
            "log": os.path.join(rundir, "client.tsv"),
            "polls": os.path.join(rundir, "polls.jsonl"),
            "stalls": os.path.join(rundir, "client-stalls.json"),
            "streams": streams_of(run),
        }
        with open(os.path.join(rundir, "client.json"), "w") as f:
            json.dump(client_spec, f, indent=1)
        cli_err = open(os.path.join(rundir, "client.stderr"), "w")
        cli = procs.add(
            "client",
            subprocess.Popen(
                [PY, os.path.join(HERE, "client.py"), os.path.join(rundir, "client.json")],
                stdout=cli_err, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_child_setup,
            ),
        )
        limit = 0.5 + duration + (1 + client_spec["client_retries"]) * client_spec["client_timeout_s"] + 15
        try:
            rc = cli.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            raise RunFailed(f"the client did not finish in {limit:.0f} s")
        if rc != 0:
            raise RunFailed(f"the client exited with {rc}; see client.stderr")
    finally:
        procs.stop_all()

    meta = {
        "scenario": scenario,
        "scenario_about": run.get("scenario_about", ""),
        "variant": variant,
        "variant_about": run.get("about", variant),
        "repeat": repeat,
        "t0": t0,
        "rate": run["rate"],
        "duration": duration,
        "sick": list(run["sick"]),
        "phases": run["phases"],
        "module": run["module"],
        "sick_ports": sick_ports,
        "origin_ports": origin_ports,
        "servers": nservers,
        "protect_level": run.get("protect_level", 0.1),
        "recover_level": run.get("recover_level", 0.95),
        "health_path": run.get("health_path", "/health"),
        "block": run.get("block"),
        "client_mode": run.get("client_mode", "open"),
        "streams": run.get("streams") or [],
        "loadavg_after": _loadavg(),
        "settings": {k: v for k, v in run.items() if k not in ("phases",)},
    }
    with open(os.path.join(rundir, "run.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)
    return report_run(meta, rundir, outdir, args.no_plot)


def report_run(meta, rundir, outdir, no_plot):
    """Figures, metrics.json and timeline.png of one finished run, from its folder alone."""
    metrics, series = analyze(meta, rundir)
    with open(os.path.join(rundir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    with open(os.path.join(rundir, "series.json"), "w") as f:
        json.dump(series, f)
    png = os.path.join(rundir, "timeline.png")
    if not no_plot:
        import plot

        plot.draw(meta, metrics, series, png)
    metrics["png"] = os.path.relpath(png, outdir)
    metrics["variant_about"] = meta["variant_about"]
    return metrics


def _loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def pct(v):
    return "-" if v is None else f"{v * 100:.1f} %"


def table(rows):
    head = (
        "| scenario | nginx | run | origin reqs while sick (to sick servers) | nginx attempts while sick "
        "| time to protect | breaker open at | client ok while sick | p50 / p99 while sick "
        "| recover after heal | close→reopen | client errors (run) | lab stalls (client / origin) "
        "| lab issues |"
    )
    out = [head, "|" + "---|" * 14]
    for m in rows:
        if "failed" in m:
            out.append(f"| {m['scenario']} | {m['variant']} | {m['repeat']} | run failed: "
                       f"{m['failed']} |" + " |" * 10)
            continue
        ok = pct(m["sick_ok_share"]) + f" of {m['sick_requests']}"
        if m.get("sick_blocks"):
            ok += " (ok per " + str(m["sick_blocks"][0][0]) + ": "
            ok += ", ".join(str(b[1]) for b in m["sick_blocks"]) + ")"
        if m["sick_stale"]:
            ok += f" (+{m['sick_stale'] / m['sick_requests'] * 100:.1f} % stale)"
        out.append(
            "| {scn} | {var} | {rep} | {orq} ({orqb}) | {att} | {prot} | {opn} | {ok} | {p50} / {p99} ms "
            "| {rec} | {flap} | {err} | {stall} | {iss} |".format(
                scn=m["scenario"], var=m["variant"], rep=m["repeat"],
                orq=m["origin_requests_sick"], orqb=m["origin_requests_sick_bad"],
                att=m["attempts_sick"], prot=fmt_s(m["protect_s"]),
                opn="-" if m["breaker_opened"] is None else (
                    fmt_s(m["open_at_s"]) if m["open_at_s"] is not None else "never"),
                ok=ok, p50=_n(m["sick_p50_ms"]), p99=_n(m["sick_p99_ms"]),
                rec=fmt_s(m["recover_s"], m["recover_horizon_s"]),
                flap="-" if m["close_reopen"] is None else m["close_reopen"],
                err=m["errors"],
                stall="{} / {} ms".format(*(_n(m["stall_max_ms"].get(w)) for w in ("client", "origin"))),
                iss=("; ".join(m["lab_issues"]) or "none")
                + (f" ({m['discarded']} discarded before)" if m.get("discarded") else ""),
            )
        )
    return "\n".join(out)


def _n(v):
    return "-" if v is None else f"{v:.0f}"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/lab", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the short smoke-test scenario (under 40 s)")
    ap.add_argument("--suite", help="run the scenarios of this suite (default: full)")
    ap.add_argument("--scenario", help="comma-separated scenario names (instead of a suite)")
    ap.add_argument("--variant", help="comma-separated variants to keep")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each (scenario, variant)")
    ap.add_argument("--module", default=os.path.join(ROOT, "build/ngx_http_circuit_breaker_module.so"),
                    help="the module to load in module setups (a private copy is loaded)")
    ap.add_argument("--nginx", default=os.path.join(ROOT, "build/nginx/sbin/nginx"),
                    help="the nginx binary, for every setup")
    ap.add_argument("--config", default=os.path.join(HERE, "scenarios.toml"),
                    help="scenarios, setups and module parameters")
    ap.add_argument("--out", help="results folder (default build/lab/<timestamp>)")
    ap.add_argument("--list", action="store_true", help="list suites, scenarios and variants")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNGs")
    ap.add_argument("--retries", type=int, default=None,
                    help="run again, up to N times, a run whose lab checks failed (a stall of the "
                         "client or origin, say); the discarded runs are kept and counted "
                         "(default 0; 2 with --quick, so a busy machine does not fail a smoke test)")
    ap.add_argument("--nice", type=int, default=-10,
                    help="niceness of the client, origin and nginx (default -10 when root; 0: "
                         "leave it)")
    ap.add_argument("--report", metavar="DIR",
                    help="no runs: recompute the figures, pictures and summary of a results folder")
    args = ap.parse_args(argv)

    if args.report:
        return report_folder(args, argv)
    if args.retries is None:
        args.retries = 2 if args.quick else 0
    global NICE
    NICE = args.nice if os.geteuid() == 0 else 0
    doc = labconf.load(args.config)
    if args.list:
        for s in doc["scenario"]:
            print(f"{s['name']:<18} suites={','.join(s.get('suites', []))} "
                  f"variants={','.join(s['variants'])}  {s.get('about', '')}")
        for name, v in doc["variants"].items():
            print(f"variant {name:<14} {v.get('about', '')}")
        return 0
    suite = "quick" if args.quick else (args.suite or "full")
    scenarios = args.scenario.split(",") if args.scenario else None
    variants = args.variant.split(",") if args.variant else None
    pairs = labconf.runs_for(doc, suite, scenarios, variants)
    if not pairs:
        print("nothing to run (see --list)", file=sys.stderr)
        return 2
    for scn, var in pairs:
        labconf.resolve(doc, scn, var)  # fail on a bad config before starting anything
    if not os.access(args.nginx, os.X_OK):
        print(f"error: nginx not found: {args.nginx} (run scripts/setup)", file=sys.stderr)
        return 2
    needs_module = any(labconf.resolve(doc, s, v)["module"] for s, v in pairs)
    if needs_module and not os.path.isfile(args.module):
        print(f"error: module not found: {args.module} (run scripts/setup)", file=sys.stderr)
        return 2

    stamp = time.strftime("%Y%m%d-%H%M%S")
    outdir = os.path.abspath(args.out or os.path.join(ROOT, "build/lab", stamp))
    os.makedirs(outdir, exist_ok=True)
    os.chmod(outdir, 0o755)
    module_copy, module_id = None, "-"
    if needs_module:
        # A private copy: rebuilding the module in place must not change a running nginx's .so.
        module_copy = os.path.join(outdir, "ngx_http_circuit_breaker_module.so")
        shutil.copyfile(args.module, module_copy)
        with open(module_copy, "rb") as f:
            module_id = hashlib.sha256(f.read()).hexdigest()[:12]
    nginx_v = subprocess.run([args.nginx, "-v"], capture_output=True, text=True).stderr.strip()

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    total = len(pairs) * args.repeat
    print(f"lab: {total} runs into {outdir}", flush=True)
    rows, started, failed = [], time.time(), 0
    load_before = _loadavg()
    try:
        n = 0
        for rep in range(1, args.repeat + 1):
            for scn, var in pairs:
                n += 1
                for attempt in range(args.retries + 1):
                    t = time.time()
                    print(f"[{n}/{total}] {scn} / {var} run {rep} ...", end=" ", flush=True)
                    try:
                        m = one_run(doc, scn, var, rep, args, outdir, module_copy)
                        print(
                            f"{time.time() - t:.0f} s: protect {fmt_s(m['protect_s'])}, ok while "
                            f"sick {pct(m['sick_ok_share'])}, recover "
                            f"{fmt_s(m['recover_s'], m['recover_horizon_s'])}"
                            + (f"; LAB ISSUES: {'; '.join(m['lab_issues'])}"
                               if m["lab_issues"] else ""),
                            flush=True,
                        )
                        bad = bool(m["lab_issues"])
                    except RunFailed as e:
                        print(f"FAILED: {e}", flush=True)
                        m = {"scenario": scn, "variant": var, "repeat": rep, "failed": str(e)}
                        bad = True
                    m["discarded"] = attempt
                    if not bad or attempt == args.retries:
                        break
                    # the lab's own check failed (a stall, say): keep the folder aside, run again
                    rundir = os.path.join(outdir, scn, f"{var}-{rep}")
                    if os.path.isdir(rundir):
                        os.rename(rundir, f"{rundir}.discarded-{attempt + 1}")
                if bad:
                    failed += 1
                rows.append(m)
    except KeyboardInterrupt:
        print("\ninterrupted: every process started was stopped; partial results follow", flush=True)
    elapsed = time.time() - started

    order = [s for s, _ in pairs]
    rows.sort(key=lambda m: (order.index(m["scenario"]),
                             pairs.index((m["scenario"], m["variant"])), m["repeat"]))
    header = (
        f"# Lab results {stamp}\n\n"
        f"- command: `scripts/lab {' '.join(sys.argv[1:] if argv is None else argv)}`\n"
        f"- nginx: {args.nginx} ({nginx_v})\n"
        f"- module: {args.module if needs_module else '-'} (sha256 {module_id})\n"
        f"- {len(rows)} runs in {elapsed:.0f} s; client, origin and nginx at nice {NICE}; "
        f"load average before {load_before}, after {_loadavg()}; definitions: lab/README.md\n"
    )
    write_summary(outdir, header, rows, args.no_plot)
    return 1 if failed or len(rows) < total else 0


def draw_comparisons(outdir, rows):
    """<scenario>/compare.png: every setup's first good run of a scenario, one above another."""
    import plot

    out = []
    by_scn = {}
    for m in rows:
        if "failed" not in m:
            by_scn.setdefault(m["scenario"], {}).setdefault(m["variant"], m)
    for scn, variants in by_scn.items():
        runs = []
        for var, m in variants.items():
            rundir = os.path.join(outdir, scn, f"{var}-{m['repeat']}")
            with open(os.path.join(rundir, "run.json")) as f:
                meta = json.load(f)
            with open(os.path.join(rundir, "series.json")) as f:
                series = json.load(f)
            runs.append((meta, m, series))
        path = os.path.join(outdir, scn, "compare.png")
        plot.compare(runs, path)
        out.append(os.path.relpath(path, outdir))
    return out


def stream_table(rows):
    """Runs with streams (lab/client.py): each stream's successes and p99 healthy, during the
    surge and after it, and the origin's goodput while sick against its capacity."""
    out = []
    for m in rows:
        st = m.get("streams")
        if not st:
            continue
        o = st.get("origin", {})
        for name, f in st.items():
            if name == "origin":
                continue
            cell = lambda x: "-" if x is None else f"{100 * x:.1f} %"  # noqa: E731
            out.append(
                f"| {m['scenario']} | {m['variant']}-{m['repeat']} | {name} "
                f"| {cell(f['healthy']['ok_share'])} | {f['healthy']['p99_ms']} "
                f"| {cell(f['sick']['ok_share'])} ({f['sick']['requests']}) "
                f"| {f['sick']['p99_ms']} | {cell(f['after_1s']['ok_share'])} "
                f"| {cell(f['after']['ok_share'])} "
                f"| {o.get('goodput_rps') or 0:.0f}/s = {cell(o.get('goodput_share'))} |"
            )
    if not out:
        return ""
    head = (
        "| scenario | run | stream | ok healthy | p99 healthy ms | ok while sick (requests) "
        "| p99 sick ms | ok 1st s after | ok after | origin goodput while sick |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(out)


def pool_table(rows):
    """Runs of a pool of three or more servers (relative ejection): the clients' latency while
    the pool was healthy, while a server was sick and from a second after it left the pool,
    when it left, and the servers ejected (those not sick: false ejections)."""
    out = []
    for m in rows:
        p = m.get("pool")
        if not p or "failed" in m:
            continue
        out.append(
            f"| {m['scenario']} | {m['variant']}-{m['repeat']} "
            f"| {_n(p['healthy_p50_ms'])} / {_n(p['healthy_p99_ms'])} "
            f"| {_n(m['sick_p50_ms'])} / {_n(m['sick_p99_ms'])} | {_n(p['after_p99_ms'])} "
            f"| {fmt_s(p['eject_at_s'])} | {fmt_s(m['protect_s'])} | {p['ejections']} "
            f"| {p['false_ejections']} | {pct(m['sick_ok_share'])} |"
        )
    if not out:
        return ""
    head = (
        "| scenario | run | p50 / p99 healthy ms | p50 / p99 while sick ms "
        "| p99 from 1 s after out ms | sick server out at | time to protect | ejections "
        "| false ejections | client ok while sick |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(out)


def write_summary(outdir, header, rows, no_plot):
    abouts = {}
    for m in rows:
        abouts.setdefault(m["variant"], m.get("variant_about", ""))
    legend = "\n".join(f"- `{k}`: {v}" for k, v in abouts.items())
    text = header + "\n" + legend + "\n\n" + table(rows) + "\n"
    streams = stream_table(rows)
    if streams:
        text += "\n" + streams + "\n"
    pools = pool_table(rows)
    if pools:
        text += "\n" + pools + "\n"
    pics = [m["png"] for m in rows if "png" in m and not no_plot]
    if pics:
        text += "\nSide by side: " + ", ".join(
            f"[{p}]({p})" for p in draw_comparisons(outdir, rows)) + "\n"
        text += "\nTimelines: " + ", ".join(f"[{p}]({p})" for p in pics) + "\n"
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print()
    print(text)
    print(f"results: {outdir}")


def report_folder(args, argv):
    outdir = os.path.abspath(args.report)
    metas = []
    for scn in sorted(os.listdir(outdir)):
        if not os.path.isdir(os.path.join(outdir, scn)):
            continue
        for run in sorted(os.listdir(os.path.join(outdir, scn))):
            if ".discarded-" in run:
                continue
            path = os.path.join(outdir, scn, run, "run.json")
            if os.path.isfile(path):
                with open(path) as f:
                    metas.append((os.path.dirname(path), json.load(f)))
    if not metas:
        print(f"error: no runs in {outdir}", file=sys.stderr)
        return 2
    rows = [report_run(meta, rundir, outdir, args.no_plot) for rundir, meta in metas]
    # the order they were run in: the config's order of scenarios and setups
    first = {}
    for _rundir, meta in sorted(metas, key=lambda x: x[1]["t0"]):
        first.setdefault(meta["scenario"], meta["t0"])
        first.setdefault((meta["scenario"], meta["variant"]), meta["t0"])
    rows.sort(key=lambda m: (first[m["scenario"]], first[(m["scenario"], m["variant"])],
                             m["repeat"]))
    header = (
        f"# Lab results {os.path.basename(outdir)} (figures recomputed)\n\n"
        f"- command: `scripts/lab {' '.join(sys.argv[1:] if argv is None else argv)}`\n"
        f"- {len(rows)} runs; definitions: lab/README.md\n"
    )
    write_summary(outdir, header, rows, args.no_plot)
    return 1 if any(m["lab_issues"] for m in rows) else 0
