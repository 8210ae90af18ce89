"""Reads lab/scenarios.toml into runs: one (scenario, variant) pair with every setting resolved.

Settings merge in this order, later winning: [defaults], [variants.NAME], the [[scenario]]
itself, then the scenario's [scenario.override.NAME] for that variant. Tables (proxy, origin)
merge key by key, everything else is replaced.
"""

import copy
import re
import tomllib

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
# Keys that describe the scenario, not a setting a variant may carry.
_SCENARIO_ONLY = {"name", "about", "suites", "variants", "override", "timeline"}


def seconds(value):
    """nginx-style duration ("200ms", "5s", "1m") or a plain number of seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*([\d.]+)\s*(ms|s|m)?\s*", str(value))
    if not m:
        raise ValueError(f'invalid duration "{value}"')
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _merge(base, top):
    out = copy.deepcopy(base)
    for key, val in top.items():
        if isinstance(val, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], val)
        else:
            out[key] = copy.deepcopy(val)
    return out


def load(path):
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    for key in ("defaults", "variants", "scenario"):
        if key not in doc:
            raise ValueError(f'{path}: no "{key}"')
    names = [s.get("name") for s in doc["scenario"]]
    if None in names or len(set(names)) != len(names):
        raise ValueError(f"{path}: every [[scenario]] needs a unique name")
    return doc


def timeline(scn):
    """[(name, start_offset_s, end_offset_s, fault or None)] from the scenario's timeline."""
    out, t = [], 0.0
    for item in scn["timeline"]:
        name, dur = item[0], seconds(item[1])
        if name == "healthy":
            fault = None
        elif isinstance(scn.get(name), dict):
            fault = scn[name]
        else:
            raise ValueError(f'scenario "{scn["name"]}": phase "{name}" has no table "{name}"')
        out.append((name, t, t + dur, fault))
        t += dur
    return out


def sick_window(phases):
    """(start, end) offsets of the first run of faulty phases: the sick part the report measures."""
    start = end = None
    for name, a, b, fault in phases:
        if fault is not None and start is None:
            start = a
        if start is not None:
            if fault is None:
                break
            end = b
    if start is None:
        raise ValueError("the timeline has no sick phase")
    return start, end


def resolve(doc, scenario_name, variant_name):
    """Every setting of one run, as a dict; raises ValueError on unknown names."""
    scn = next((s for s in doc["scenario"] if s["name"] == scenario_name), None)
    if scn is None:
        raise ValueError(f'no scenario "{scenario_name}"')
    if variant_name not in doc["variants"]:
        raise ValueError(f'scenario "{scenario_name}": no variant "{variant_name}"')
    run = _merge(doc["defaults"], doc["variants"][variant_name])
    run = _merge(run, {k: v for k, v in scn.items() if k not in _SCENARIO_ONLY})
    run = _merge(run, scn.get("override", {}).get(variant_name, {}))
    run["scenario"] = scenario_name
    run["scenario_about"] = scn.get("about", "")
    run["variant"] = variant_name
    run["timeline"] = scn.get("timeline", doc["defaults"].get("timeline"))
    scn_for_phases = dict(scn, timeline=run["timeline"])
    run["phases"] = timeline(scn_for_phases)
    run["sick"] = sick_window(run["phases"])
    run["module"] = "breaker" in run
    return run


def runs_for(doc, suite=None, scenarios=None, variants=None):
    """(scenario, variant) pairs: those of a suite, or of the named scenarios, in file order."""
    pairs = []
    for scn in doc["scenario"]:
        if scenarios is not None:
            if scn["name"] not in scenarios:
                continue
        elif suite not in scn.get("suites", []):
            continue
        for v in scn["variants"]:
            if variants is None or v in variants:
                pairs.append((scn["name"], v))
    return pairs
