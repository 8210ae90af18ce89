"""The timeline picture of one lab run (matplotlib, no display needed)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from analyze import fmt_s  # noqa: E402

# Outcome kinds, bottom to top, with their colours.
KINDS = [
    ("ok", "success", "#2ca02c"),
    ("stale", "stale (cache)", "#17becf"),
    ("shed_open", "503 short-circuit (open)", "#ff7f0e"),
    ("shed_half_open", "503 short-circuit (half_open)", "#ffbb78"),
    ("shed_recovering", "503 short-circuit (recovering)", "#bcbd22"),
    ("shed_limited", "503 short-circuit (limited)", "#9467bd"),
    ("error", "error (5xx from origin or nginx)", "#d62728"),
    ("timeout", "timeout (504 or client)", "#7f0000"),
]
STATE_COLOURS = {"closed": "#2ca02c", "recovering": "#bcbd22", "half_open": "#ffbb33",
                 "open": "#d62728"}


def _state_order(state):
    order = list(STATE_COLOURS)
    return order.index(state) if state in order else len(order)


def draw(meta, metrics, series, path):
    nsec = len(series["received"])
    xs = list(range(nsec))
    fig, axes = plt.subplots(
        4, 1, figsize=(12.5, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1.4, 0.5]}
    )
    ax_out, ax_load, ax_lat, ax_state = axes
    for ax in axes:
        for name, a, b, fault in meta["phases"]:
            if fault is not None:
                ax.axvspan(a, b, color="#f4cccc", alpha=0.5, lw=0)
                for edge in (a, b):
                    ax.axvline(edge, color="#444444", lw=0.8, ls="--", zorder=5)

    bottom = [0] * nsec
    handles = []
    for key, label, colour in KINDS:
        vals = series["kinds"].get(key)
        if not vals or not any(vals):
            continue
        ax_out.bar(xs, vals, width=1.0, bottom=bottom, color=colour, align="edge", lw=0)
        bottom = [b + v for b, v in zip(bottom, vals)]
        handles.append(Patch(color=colour, label=label))
    others = [k for k in series["kinds"] if k not in {k for k, _, _ in KINDS}]
    for key in others:
        vals = series["kinds"][key]
        ax_out.bar(xs, vals, width=1.0, bottom=bottom, color="#7f7f7f", align="edge", lw=0)
        bottom = [b + v for b, v in zip(bottom, vals)]
        handles.append(Patch(color="#7f7f7f", label=key))
    ax_out.set_ylabel("client requests / s\n(by final outcome)")
    ax_out.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1), fontsize=7)

    edges = list(range(nsec + 1))
    ax_load.stairs(series["attempts"], edges, label="attempts by nginx", color="#1f77b4", lw=1.5)
    if series["attempts_bad"] != series["attempts"]:
        ax_load.stairs(series["attempts_bad"], edges, label="attempts to the sick server(s)",
                       color="#d62728")
    ax_load.stairs(series["received"], edges, label="received by the origin", color="#555555",
                   ls="--")
    ax_load.axhline(meta["rate"], color="#999999", lw=0.8, ls=":", label="client rate")
    ax_load.set_ylabel("origin load / s")
    ax_load.legend(loc="upper left", bbox_to_anchor=(1.005, 1), fontsize=7)

    p50 = [v * 1000 if v is not None else float("nan") for v in series["p50"]]
    p99 = [v * 1000 if v is not None else float("nan") for v in series["p99"]]
    ax_lat.stairs(p50, edges, label="p50", color="#1f77b4")
    ax_lat.stairs(p99, edges, label="p99", color="#ff7f0e")
    # stalls of the lab's own client/origin (CPU starvation), so a reader can discount them
    for who, t, dur in series.get("stalls", []):
        ax_lat.axvspan(t, t + dur, ymin=0, ymax=0.12, color="black" if dur >= 0.25 else "#999999", lw=0)
    if series.get("stalls"):
        ax_lat.text(1.005, 0.0, "▮ lab stall", transform=ax_lat.transAxes, fontsize=7, va="bottom")
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("client latency\nms")
    ax_lat.legend(loc="upper left", bbox_to_anchor=(1.005, 1), fontsize=7)

    band = series["band"]
    if band:
        for j, (t, state) in enumerate(band):
            t_next = band[j + 1][0] if j + 1 < len(band) else t + 0.1
            ax_state.axvspan(t, t_next, color=STATE_COLOURS.get(state, "#7f7f7f"), lw=0)
        ax_state.legend(
            handles=[Patch(color=STATE_COLOURS.get(s, "#7f7f7f"), label=s)
                     for s in sorted({s for _, s in band}, key=_state_order)],
            loc="upper left", bbox_to_anchor=(1.005, 1.1), fontsize=7,
        )
    else:
        ax_state.text(0.5, 0.5, "no breaker (stock nginx)", ha="center", va="center",
                      transform=ax_state.transAxes, fontsize=8, color="#555555")
    ax_state.set_yticks([])
    ax_state.set_ylabel("breaker", rotation=0, ha="right", va="center")
    ax_state.set_xlabel("seconds (shaded: sick)")
    ax_state.set_xlim(0, nsec)

    m = metrics
    ok = "-" if m["sick_ok_share"] is None else f"{m['sick_ok_share'] * 100:.1f} %"
    title = (
        f"{meta['scenario']} / {meta['variant']} (run {meta['repeat']}): {meta['scenario_about']}\n"
        f"{meta['variant_about']}; {meta['rate']:.0f} req/s open loop\n"
        f"protect {fmt_s(m['protect_s'])}, success while sick {ok}, "
        f"recover {fmt_s(m['recover_s'], m['recover_horizon_s'])}, "
        f"origin requests while sick {m['origin_requests_sick']}"
    )
    fig.suptitle(title, fontsize=9, x=0.01, ha="left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def compare(runs, path):
    """One scenario, every setup: client outcomes per second with the breaker band beneath."""
    n = len(runs)
    fig = plt.figure(figsize=(12.5, 2.3 * n + 0.9))
    outer = fig.add_gridspec(n, 1, hspace=0.32)
    first = None
    kinds_seen = {}
    states_seen = set()
    for j, (meta, m, series) in enumerate(runs):
        inner = outer[j].subgridspec(2, 1, height_ratios=[3, 0.35], hspace=0.06)
        ax = fig.add_subplot(inner[0], sharex=first)
        band_ax = fig.add_subplot(inner[1], sharex=ax)
        first = first or ax
        nsec = len(series["received"])
        xs = list(range(nsec))
        bottom = [0] * nsec
        for key, label, colour in KINDS:
            vals = series["kinds"].get(key)
            if not vals or not any(vals):
                continue
            ax.bar(xs, vals, width=1.0, bottom=bottom, color=colour, align="edge", lw=0)
            bottom = [b + v for b, v in zip(bottom, vals)]
            kinds_seen[label] = colour
        ax.stairs(series["attempts_bad"], list(range(nsec + 1)), color="black", lw=1.2,
                  label="attempts to the sick server(s)")
        for _name, a, b, fault in meta["phases"]:
            if fault is not None:
                for x in (a, b):
                    ax.axvline(x, color="#444444", lw=0.8, ls="--")
                    band_ax.axvline(x, color="#444444", lw=0.8, ls="--")
        ok = "-" if m["sick_ok_share"] is None else f"{m['sick_ok_share'] * 100:.1f} %"
        ax.set_title(
            f"{meta['variant_about']}: protect {fmt_s(m['protect_s'])}, ok while sick {ok}, "
            f"recover {fmt_s(m['recover_s'], m['recover_horizon_s'])}",
            fontsize=8, loc="left",
        )
        ax.set_ylabel("req/s", fontsize=8)
        ax.tick_params(labelbottom=False, labelsize=7)
        band = series["band"]
        for k, (t, state) in enumerate(band):
            t_next = band[k + 1][0] if k + 1 < len(band) else t + 0.1
            band_ax.axvspan(t, t_next, color=STATE_COLOURS.get(state, "#7f7f7f"), lw=0)
            states_seen.add(state)
        if not band:
            band_ax.text(0.5, 0.5, "no breaker", ha="center", va="center",
                         transform=band_ax.transAxes, fontsize=7, color="#555555")
        band_ax.set_yticks([])
        band_ax.tick_params(labelbottom=(j == n - 1), labelsize=7)
        band_ax.set_xlim(0, nsec)
    handles = [Patch(color=c, label=lbl) for lbl, c in kinds_seen.items()]
    handles.append(plt.Line2D([], [], color="black", lw=1.2, label="attempts to the sick server(s)"))
    handles += [Patch(color=STATE_COLOURS.get(s, "#7f7f7f"), label=f"breaker {s}")
                for s in sorted(states_seen, key=_state_order)]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=7, frameon=False)
    meta = runs[0][0]
    fig.suptitle(
        f"{meta['scenario']}: {meta['scenario_about']} ({meta['rate']:.0f} req/s open loop; "
        "dashed: sick phase)",
        fontsize=9, x=0.01, ha="left",
    )
    fig.subplots_adjust(left=0.06, right=0.99, top=1 - 0.45 / fig.get_figheight(),
                        bottom=0.75 / fig.get_figheight())
    fig.savefig(path, dpi=90)
    plt.close(fig)
