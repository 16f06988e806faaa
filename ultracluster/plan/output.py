"""A finished plan → plan.csv, plan.json, top-N.yaml, plan.html (atomic files) and the terminal's text.

top-N.yaml is the base scenario with the layout's cluster, parallelism and training fields, every default
written out, validated by `load_scenario` before it is written: `ultracluster run top-1.yaml` takes it as it is.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..replay.events import BREAKDOWN_KEYS
from ..report.write import atomic_write_text
from ..scenario import Scenario, load_scenario
from ..layouts.fast import has_zero_stages

if TYPE_CHECKING:
    from . import PlanResult

CSV_FLOAT_FORMAT = "%.10g"


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def scenario_dict(base: Scenario, row, name: str) -> dict:
    """The scenario of a plan row as a plain dict (what top-N.yaml holds), named `name`."""
    d = base.to_dict()
    d["name"] = name
    d["parallelism"].update({"tp": int(row["tp"]), "pp": int(row["pp"]), "cp": int(row["cp"]), "ep": int(row["ep"]),
                             "dp": int(row["dp"]), "sequence_parallel": bool(row["sequence_parallel"]),
                             "pp_schedule": str(row["pp_schedule"]), "virtual_stages": int(row["virtual_stages"])})
    zero = int(row["zero"])
    d["training"].update({"micro_batch": int(row["micro_batch"]), "recompute": str(row["recompute"]),
                          "zero1": zero >= 1})
    if has_zero_stages():
        d["training"]["zero"] = zero
    if (d["cluster"]["instance"], d["cluster"]["instances"]) != (row["instance"], int(row["instances"])):
        d["emulation"]["instances_per_actor"] = "auto"   # a folding meant for the scenario's size is not this one's
    if d["cluster"]["instance"] != row["instance"]:
        d["cluster"].pop("ultraserver", None)         # the new instance type's default
    d["cluster"].update({"instance": str(row["instance"]), "instances": int(row["instances"]), "lnc": int(row["lnc"])})
    if d.get("faults"):
        d["faults"]["degraded"] = []                   # instance ids of one cluster size: planned healthy
    return _drop_none(d)


def layout_yaml(base: Scenario, row, rank: int, objective: str, source: str | None) -> tuple[str, Scenario]:
    """(top-N.yaml text, its validated Scenario)."""
    d = scenario_dict(base, row, f"{base.name}-top-{rank}")
    scenario = load_scenario(d)                      # the same validation `ultracluster run` applies
    head = [f"# ultracluster plan: layout {rank} of {base.name}" + (f" ({source})" if source else ""),
            f"# ranked by {objective}; predicted step {float(row['step_time_s']):.6g} s, "
            f"{float(row['tokens_per_s']):,.0f} tokens/s, HBM peak {float(row['hbm_peak_gib']):.2f} GiB per rank",
            f"# {row['layout']}"]
    return "\n".join(head) + "\n" + yaml.safe_dump(d, sort_keys=False), scenario


def write_plan_dir(result: PlanResult, out: str | Path) -> Path:
    """plan.csv, top-N.yaml, plan.html, then plan.json (last: its presence marks a complete plan)."""
    from .html import render_plan_html

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "plan.csv", result.table.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    for i, text in enumerate(result.yamls, 1):
        atomic_write_text(out / f"top-{i}.yaml", text)
    for old in out.glob("top-*.yaml"):               # an earlier plan's further layouts are not this plan's
        rank = old.stem.removeprefix("top-")
        if rank.isdigit() and int(rank) > len(result.yamls):
            old.unlink()
    atomic_write_text(out / "plan.html", render_plan_html(result))
    atomic_write_text(out / "plan.json", json.dumps(result.summary, indent=2, allow_nan=False) + "\n")
    return out


def _fmt(v, spec: str, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:{spec}}{unit}"


def format_plan(result: PlanResult) -> str:
    """The terminal's text: what was searched, the best layouts with where their time goes, and the notes."""
    s = result.summary
    lines = [f"plan {s['scenario']}: {s['layouts_evaluated']:,} layouts in {s['wall_s']:.2f} s "
             f"({s['layouts_per_s']:,.0f} layouts/s, {s['evaluated_by']}), {s['feasible']:,} fit in HBM"]
    if not result.top:
        c = s.get("closest")
        lines.append("no layout fits" + (f"; closest: {c['label']}: {c['reason']}" if c else ""))
        return "\n".join(lines)
    head = ["#", "layout", "step s", "replayed s (80 % interval)", "tokens/s", "MFU", "$/M tok", "HBM GiB"]
    rows = []
    by_rank = {r["rank"]: r for r in s["replayed"]}
    for i, row in enumerate(result.top, 1):
        rep = by_rank.get(i, {})
        band = "" if rep.get("step_time_low_s") is None else \
            f" ({_fmt(rep['step_time_low_s'], '.4g')}-{_fmt(rep['step_time_high_s'], '.4g')})"
        rows.append([str(i), row["label"], _fmt(row["step_time_s"], ".4g"), _fmt(rep.get("replay_step_time_s"), ".4g") + band,
                     _fmt(row["tokens_per_s"], ",.0f"), _fmt(None if row["mfu"] is None else 100 * row["mfu"], ".1f", "%"),
                     _fmt(row["usd_per_million_tokens"], ",.3f"), _fmt(row["hbm_peak_gib"], ".1f")])
    widths = [max(len(r[c]) for r in [head] + rows) for c in range(len(head))]
    lines.append("  ".join(h.ljust(w) if c == 1 else h.rjust(w) for c, (h, w) in enumerate(zip(head, widths))))
    for r in rows:
        lines.append("  ".join(x.ljust(w) if c == 1 else x.rjust(w) for c, (x, w) in enumerate(zip(r, widths))))
    lines.append("where the time goes (replayed):")
    for rep in s["replayed"]:
        b = rep.get("breakdown") or {}
        step = rep.get("replay_step_time_s")
        if not b or not step:
            continue
        parts = ", ".join(f"{k.removesuffix('_s')} {100 * b[k] / step:.0f}%" for k in BREAKDOWN_KEYS
                          if b.get(k) and b[k] / step >= 0.005)
        lines.append(f"  {rep['rank']}: {parts}")
    for note in s.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)
