#!/usr/bin/python3
"""Draws cb-replay's timelines (`--timeline DIR`): one PNG per breaker's CSV, requests per
second with the bad and refused ones, the bad rate, and the breaker's state as bands.

    replay/plot.py DIR            every DIR/*.csv -> DIR/*.png
    replay/plot.py FILE.csv ...   each beside its CSV

Debian's python3 with python3-matplotlib (scripts/setup installs it); no display needed.
"""

import csv
import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

STATES = {"closed": None, "half_open": "#ffbb33", "open": "#d62728"}


def read(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({
                "second": int(r["second"]),
                "requests": int(r["requests"]),
                "bad": int(r["bad"]),
                "slow": int(r["slow"]),
                "refused": int(r["refused"]),
                "state": r["state"],
            })
    return rows


def bands(rows):
    """(start, end, state) spans of the state, in seconds from the first row."""
    spans = []
    t0 = rows[0]["second"]
    for r in rows:
        t = r["second"] - t0
        if spans and spans[-1][2] == r["state"]:
            spans[-1][1] = t + 1
        else:
            spans.append([t, t + 1, r["state"]])
    return spans


def plot(path):
    rows = read(path)
    if not rows:
        return None
    t0 = rows[0]["second"]
    x = [r["second"] - t0 for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    for ax in (top, bottom):
        for start, end, state in bands(rows):
            if STATES.get(state):
                ax.axvspan(start, end, color=STATES[state], alpha=0.18, lw=0)
    top.step(x, [r["requests"] for r in rows], where="post", color="#1f77b4",
             label="requests")
    top.step(x, [r["bad"] for r in rows], where="post", color="#d62728", label="bad")
    top.step(x, [r["refused"] for r in rows], where="post", color="#ff7f0e",
             label="would be refused")
    top.set_ylabel("per second")
    handles, _ = top.get_legend_handles_labels()
    handles += [Patch(color=c, alpha=0.3, label=s) for s, c in STATES.items() if c]
    top.legend(handles=handles, loc="upper right", fontsize=8)
    rate = [100.0 * r["bad"] / r["requests"] if r["requests"] else 0 for r in rows]
    slow = [100.0 * r["slow"] / r["requests"] if r["requests"] else 0 for r in rows]
    bottom.step(x, rate, where="post", color="#d62728", label="bad %")
    if any(slow):
        bottom.step(x, slow, where="post", color="#9467bd", label="slow %")
    bottom.set_ylim(0, 100)
    bottom.set_ylabel("%")
    bottom.set_xlabel("seconds from %d (Unix time)" % t0)
    bottom.legend(loc="upper right", fontsize=8)
    name = os.path.splitext(os.path.basename(path))[0]
    top.set_title("cb-replay: %s" % name)
    fig.tight_layout()
    out = os.path.splitext(path)[0] + ".png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(args):
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    paths = []
    for a in args:
        paths += sorted(glob.glob(os.path.join(a, "*.csv"))) if os.path.isdir(a) else [a]
    for p in paths:
        out = plot(p)
        if out:
            print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
