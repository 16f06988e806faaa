"""A finished plan → plan.csv, the full table, plan.json, top-N.yaml, plan.html (atomic files) and the
terminal's text.

plan.csv holds the rows a reader acts on (the top layouts, the best of each instance type, the Pareto front,
the scenario's own layout); every layout evaluated goes to `plan-full.parquet` (zstd), or `plan-full.csv.gz`
where pyarrow is not installed. top-N.yaml is the base scenario with the layout's cluster, parallelism and
training fields, every default written out but `parallelism.dp` (derived, so `--set cluster.instances=N` works
on it), validated by `load_scenario` before it is written: `ultracluster run top-1.yaml` takes it as it is.
"""
from __future__ import annotations

import gzip
import io
import json
import math
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .. import stacks
from ..replay.result import BREAKDOWN_KEYS
from ..report.atomic import atomic_write_bytes
from ..report.output_rule import TEMP_FILE, check_out_dir, is_regular
from ..report.rundir import RUN_FILE
from ..report.write import atomic_write_text
from ..scenario import Scenario, load_scenario
from ..scenario.schema import EXPLICIT_KEY
from ..job import Job
from ..layouts.ranking import END_NAMES
from ..step.counts import ultraserver_default
from .text import OBJECTIVE_SHORT, band_text, fmt_number, mfu_text, ranking_lines

if TYPE_CHECKING:
    from .result import PlanResult

CSV_FLOAT_FORMAT = "%.10g"
PLAN_FILES = ("plan.json", "plan.csv", "plan.html", "plan-full.parquet", "plan-full.csv.gz")
PARQUET_COMPRESSION = "zstd"


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def scenario_dict(base: Scenario, row, name: str, prices: dict[str, float] | None = None) -> dict:
    """The scenario of a plan row as a plain dict (what top-N.yaml holds), named `name`: `parallelism.dp` left
    out (`load_scenario` derives it from the instances, so `--set cluster.instances=N` works on the file), and
    `cluster.price_per_hour_usd` the price given for the row's instance type (`prices`: the plan's overrides of
    the catalog), else none (the catalog's). The layout itself is its `job.Job.of_row` (`layouts.evaluator.layout_scenario`), the one
    rule from a row to its scenario that the planner timed it by (its stack's defaults where the scenario gives no key)."""
    d = Job.of_row(base, row, name).document()
    d.pop(EXPLICIT_KEY, None)        # a top-N.yaml gives every key of its row: all its own
    d["parallelism"].pop("dp", None)
    if (base.cluster.instance, base.cluster.instances) != (row["instance"], int(row["instances"])):
        d["emulation"]["instances_per_actor"] = "auto"   # a folding meant for the scenario's size is not this one's
    if d["cluster"].get("ultraserver") == ultraserver_default(str(row["instance"])):
        d["cluster"].pop("ultraserver", None)         # the instance type's default: left to it (a portable plan)
    d["cluster"].pop("price_per_hour_usd", None)
    if prices and str(row["instance"]) in prices:
        d["cluster"]["price_per_hour_usd"] = float(prices[str(row["instance"])])
    return _drop_none(d)


def top_name(base: Scenario, row, rank: int) -> str:
    """A top layout's scenario name: the model (its preset, else the scenario's name), the instance type and
    count, the rank: `llama3.1-70b-trn2.48xlarge-16-top-1`."""
    return f"{base.model.preset or base.name}-{row['instance']}-{int(row['instances'])}-top-{rank}"


def layout_yaml(base: Scenario, row, rank: int, objective: str, source: str | None,
                prices: dict[str, float] | None = None) -> tuple[str, Scenario]:
    """(top-N.yaml text, its validated Scenario)."""
    d = scenario_dict(base, row, top_name(base, row, rank), prices)
    scenario = load_scenario(d)                      # the same validation `ultracluster run` applies
    if scenario.parallelism.dp != int(row["dp"]):    # dp is derived: it must come out as the plan evaluated it
        raise AssertionError(f"top-{rank}.yaml derives dp {scenario.parallelism.dp}, the plan evaluated {row['dp']}")
    head = [f"# ultracluster plan: layout {rank} of {base.name}" + (f" ({source})" if source else ""),
            f"# ranked by {objective}; predicted step {float(row['step_time_s']):.6g} s, "
            f"{float(row['tokens_per_s']):,.0f} tokens/s, HBM peak {float(row['hbm_peak_gib']):.4f} of "
            f"{float(row['hbm_capacity_gib']):.4f} GiB per rank",
            f"# {row['layout']}" + (f" (equivalent: {row['equivalent']})" if row.get("equivalent") else ""),
            f"# parallelism.dp is derived ({int(row['dp'])} here): --set cluster.instances=N keeps tp, pp and cp"]
    return "\n".join(head) + "\n" + yaml.safe_dump(d, sort_keys=False), scenario


def full_table_name() -> str:
    """The full table's file: Parquet (zstd) with pyarrow, else gzip CSV."""
    try:
        import pyarrow  # noqa: F401  (the `parquet` and `test` extras)
    except ImportError:
        return "plan-full.csv.gz"
    return "plan-full.parquet"


def full_table_bytes(table, name: str) -> bytes:
    """The full table as `name` holds it (`full_table_name`)."""
    if name.endswith(".parquet"):
        buf = io.BytesIO()
        table.to_parquet(buf, index=False, compression=PARQUET_COMPRESSION)
        return buf.getvalue()
    text = table.to_csv(index=False, float_format=CSV_FLOAT_FORMAT).encode("utf-8")
    return gzip.compress(text, compresslevel=6, mtime=0)


def read_full_table(out: str | Path):
    """The full table of a plan directory (every layout evaluated) as a DataFrame."""
    import pandas as pd

    out = Path(out)
    if (out / "plan-full.parquet").exists():
        return pd.read_parquet(out / "plan-full.parquet")
    return pd.read_csv(out / "plan-full.csv.gz")


def plan_rows(table):
    """plan.csv's rows: the top layouts, the best of each instance type and of each stack, the Pareto front and the
    scenario's own layout, in search order."""
    keep = table["rank"].notna() | table["best_of_type"] | table["pareto"] | table["scenario_layout"]
    if "best_of_stack" in table.columns:
        keep |= table["best_of_stack"]
    return table[keep.to_numpy(dtype=bool)]


TOP_FILE = re.compile(r"^top-[0-9]+\.yaml$")
TOP_RUN = re.compile(r"^top-[0-9]+$|^\.top-[0-9]+\.(lock|partial-.+)$")   # runs/: the replays' run directories


def _plan_owns(entry: Path) -> bool:
    """Whether a plan writes `entry` of its directory: its files, top-N.yaml, runs/ holding only the replays' run
    directories (runs/top-N/ with nothing but run files, their locks), and the temporary files of a killed write."""
    name = entry.name
    if TEMP_FILE.match(name) or (name in PLAN_FILES or TOP_FILE.match(name)) and is_regular(entry):
        return True
    if name != "runs" or entry.is_symlink() or not entry.is_dir():
        return False
    for run in entry.iterdir():
        if not TOP_RUN.match(run.name) or run.is_symlink():
            return False
        if run.is_dir() and any(not is_regular(f) or not RUN_FILE.match(f.name) for f in run.iterdir()):
            return False
    return True


def _earlier_plan(out: Path) -> str | None:
    found = [f for f in PLAN_FILES if (out / f).exists()] + sorted(p.name for p in out.glob("top-*.yaml"))
    found += ["runs/" + p.name for p in sorted((out / "runs").glob("top-*"))] if (out / "runs").is_dir() else []
    if not found:
        return None
    when = ""
    if (out / "plan.json").exists():
        stamp = datetime.fromtimestamp((out / "plan.json").stat().st_mtime, timezone.utc)
        when = f" written {stamp:%Y-%m-%d %H:%M} UTC"
    return f"a plan ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}{when})"


def check_plan_dir(out: str | Path, force: bool, inputs=()) -> bool:
    """The output rule for a plan directory (`report.rundir.check_out_dir`): whether `out` holds an earlier plan
    (then replaced only with `force`: OutDirError otherwise). A directory holding anything a plan does not write
    (the user's files, a runs/ with other entries), a file, a device, or the plan's own input is refused
    whatever `force` says."""
    return check_out_dir(out, force, _plan_owns, _earlier_plan, "plan directory", "a plan", inputs=inputs)


def write_plan_dir(result: PlanResult, out: str | Path) -> Path:
    """plan.csv, the full table, top-N.yaml, plan.html, then plan.json (last: its presence marks a complete plan).
    What an earlier plan left there that this one does not write (further top-N files and runs, the other full
    table format) is removed first."""
    from .html import render_plan_html

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").unlink(missing_ok=True)       # incomplete until written again, last
    full_name = result.summary.get("full_table") or full_table_name()
    for name in PLAN_FILES:
        if name.startswith("plan-full") and name != full_name:
            (out / name).unlink(missing_ok=True)
    kept = {int(r["rank"]) for r in result.summary.get("replayed", []) if r.get("run_dir")}
    for old in list(out.glob("top-*.yaml")) + list((out / "runs").glob("top-*")):
        rank = old.name.removeprefix("top-").removesuffix(".yaml")
        if rank.isdigit() and (int(rank) > len(result.yamls) or (old.is_dir() and int(rank) not in kept)):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    if (out / "runs").is_dir() and not any((out / "runs").iterdir()):
        (out / "runs").rmdir()
    atomic_write_text(out / "plan.csv", plan_rows(result.table).to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    atomic_write_bytes(out / full_name, full_table_bytes(result.table, full_name))
    for i, text in enumerate(result.yamls, 1):
        atomic_write_text(out / f"top-{i}.yaml", text)
    atomic_write_text(out / "plan.html", render_plan_html(result))
    atomic_write_text(out / "plan.json", json.dumps(result.summary, indent=2, allow_nan=False) + "\n")
    return out


def _columns(head: list[str], rows: list[list[str]], left: tuple[int, ...] = (1,)) -> list[str]:
    widths = [max(len(r[c]) for r in [head] + rows) for c in range(len(head))]
    return ["  ".join(x.ljust(w) if c in left else x.rjust(w) for c, (x, w) in enumerate(zip(r, widths))).rstrip()
            for r in [head] + rows]


def _label(row: dict) -> str:
    """A layout's label, with the settings folded into it: `... no-rc zero1 [= sel-rc]`."""
    eq = row.get("equivalent")
    if not eq:
        return row["label"]
    short = {"recompute none": "no-rc", "recompute selective": "sel-rc", "recompute full": "full-rc"}
    alts = ["+".join(short.get(p, p.replace("zero ", "zero").replace("schedule ", "").replace("interleaved ", "int"))
                     for p in alt.split(" + ")) for alt in eq.split("; ")]
    return f"{row['label']} [= {', '.join(alts)}]"


def _hbm(row: dict) -> str:
    return f"{fmt_number(row.get('hbm_peak_gib'), '.3f')} of {fmt_number(row.get('hbm_capacity_gib'), '.3f')}"


def _cost_cells(row: dict, with_tokens: bool) -> list[str]:
    """$ per M tokens (and with --tokens days and the total), "no price" where the instance type has none (a note
    says how to give one)."""
    priced = row.get("cluster_usd_per_hour") is not None
    cells = [fmt_number(row.get("usd_per_million_tokens"), ",.3f") if priced else "no price"]
    if with_tokens:
        cells += [fmt_number(row.get("time_to_train_days"), ",.1f"),
                  fmt_number(row.get("total_cost_usd"), ",.0f") if priced else "no price"]
    return cells


TERMINAL_WIDTH = 100      # the terminal's text fits this many columns unless `plan --wide`


def _fit(lines: list[str], width: int = TERMINAL_WIDTH) -> list[str]:
    """Lines wrapped at spaces to `width` columns, continuations indented."""
    import textwrap

    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip())
        out += textwrap.wrap(line, width, subsequent_indent=" " * (lead + 4), break_long_words=False,
                             break_on_hyphens=False) or [line]
    return out


def _days_band(r: dict) -> str:
    d, lo, hi = r.get("time_to_train_days"), r.get("time_to_train_low_days"), r.get("time_to_train_high_days")
    if d is None:
        return "n/a"
    return f"{d:,.1f}" + (f" ({lo:,.1f}-{hi:,.1f})" if lo is not None and hi is not None else "")


def _musd(v) -> str:
    return "n/a" if v is None else f"{v / 1e6:,.2f}"


def _usd_band(r: dict) -> str:
    """A decision row's total US dollars (millions) with the 80 % interval of its step, or `no price`."""
    usd, lo, hi = r.get("total_cost_usd"), r.get("total_cost_low_usd"), r.get("total_cost_high_usd")
    if usd is None:
        return "no price"
    return _musd(usd) + (f" ({_musd(lo)}-{_musd(hi)})" if lo is not None and hi is not None else "")


def decision_lines(s: dict, wide: bool = False) -> list[str]:
    """The decision view on the terminal: a row per (instance type, count, stack) with its best layout, days and
    total $ (each with the 80 % interval of the step; the FSx part beside the layout), goodput and MFU, then the verdicts between neighbours. Fits 100 columns (the layout on
    its own line) unless `wide`."""
    d = s.get("decision") or {}
    rows = d.get("rows") or []
    if not rows:
        return []
    budget = any(r.get("time_to_train_days") is not None for r in rows if r.get("fits"))
    out = [f"decision: the best layout of each instance type, count and stack (by {d.get('ranked_by')}); "
           f"80 % intervals"]
    head = ["type", "inst", "chips", "stack"] + (["days (80 %)", "total $M (80 %)", "goodput"] if budget else
                                                 ["tokens/s (80 %)", "$/M tok"]) + ["MFU"]
    if wide:
        head += ["off domain", "layout"]
    cells, layouts = [], []
    for r in rows:
        base = [r["instance"].split(".")[0], f"{r['instances']:,}", f"{r['chips']:,}",
                stacks.SHORT.get(r["stack"], r["stack"])]
        if not r.get("fits"):
            cells.append(base + ["-"] * (len(head) - 4 - (2 if wide else 0)) + (["-", r["reason"]] if wide else []))
            layouts.append(f"  {r['reason']}")
            continue
        if budget:
            nums = [_days_band(r), _usd_band(r), fmt_number(None if r.get("goodput") is None else 100 * r["goodput"],
                                                              ".1f", " %")]
        else:
            nums = [band_text(r.get("tokens_per_s"), r.get("tokens_per_s_low"), r.get("tokens_per_s_high")),
                    fmt_number(r.get("usd_per_million_tokens"), ",.3f") if r.get("cluster_usd_per_hour") else "no price"]
        off = ",".join(r.get("extrapolated") or []) or "-"
        fsx = r.get("storage_cost_usd") if budget and r.get("total_cost_usd") is not None else None
        fsx = f"; of the total, FSx ${_musd(fsx)} M" if fsx else ""
        cells.append(base + nums + [mfu_text(r)] + ([off, r["label"].split(": ", 1)[-1] + fsx] if wide else []))
        layouts.append(f"  {r['label'].split(': ', 1)[-1]}; off domain: {off}{fsx}")
    table = _columns(head, cells, left=(0, 3) if not wide else (0, 3, len(head) - 2, len(head) - 1))
    out.append(table[0])
    for line, lay in zip(table[1:], layouts):
        out.append(line)
        if not wide:
            out.append(lay)
    verdicts = d.get("verdicts") or []
    if verdicts:
        out.append("verdicts between neighbours (a finding only where the 80 % intervals are apart):")
        out += [f"  {v['verdict']}" for v in verdicts]
    return out


def _top_lines(result: PlanResult, with_tokens: bool, spec: str, ranks: list[str]) -> list[str]:
    """The top layouts in 100 columns: the label, then its figures, then its comparison with the own layout."""
    s = result.summary
    by_rank = {r["rank"]: r for r in s["replayed"]}
    lines = ["#  layout (replayed s: the run's step; the interval is its run's when replayed)"]
    for i, row in enumerate(result.top, 1):
        rep = by_rank.get(i, {})
        lines.append(f"{i}  {_label(row)}")
        fig = [f"step {band_text(row['step_time_s'], row.get('step_time_low_s'), row.get('step_time_high_s'))} s"]
        if rep.get("replay_step_time_s") is not None:
            fig.append(f"replayed {fmt_number(rep.get('replay_step_time_s'), '.4g')} s")
        if ranks:
            fig.append(f"{ranks[0]} {fmt_number(row.get('rank_value'), spec)}")
        fig += [f"{fmt_number(row['tokens_per_s'], ',.0f')} tokens/s", f"MFU {mfu_text(row)}", f"HBM {_hbm(row)} GiB"]
        lines.append("   " + ", ".join(fig))
        cost = _cost_cells(row, with_tokens)
        money = [f"$/M tok {cost[0]}"] + ([f"{cost[1]} days", f"total $ {cost[2]}"] if with_tokens else [])
        lines.append("   " + ", ".join(money) + f"; off domain: {','.join(row.get('extrapolated') or []) or '-'}")
        lines.append(f"   vs the scenario's layout: {row.get('vs_scenario') or 'n/a'}")
    return lines


def format_plan(result: PlanResult, wide: bool = True) -> str:
    """The terminal's text: what was searched, the decision view (the best of each instance type, count and stack,
    with verdicts between neighbours), the best layouts (the value that ranked them, the point, the 80 %
    interval, where each stands against the evidence, and each against the scenario's own layout) with where
    their time goes, and the notes. With --tokens, days to train and the total cost of each. `wide` False (the
    CLI without `--wide`): every line within 100 columns, the best of each stack and type left to the decision view
    and plan.csv."""
    if not wide:
        return "\n".join(_fit(_format_plan(result, False).splitlines()))
    return _format_plan(result, True)


def _format_plan(result: PlanResult, wide: bool) -> str:
    s = result.summary
    headroom = s.get("hbm_headroom")
    fit = f"{s['feasible']:,} fit in HBM" + (f" with {100 * headroom:.4g} % headroom" if headroom else "")
    folded = f"; {s['folded']:,} equivalent settings folded" if s.get("folded") else ""
    lines = [f"plan {s['scenario']}: {s['layouts_evaluated']:,} layouts in {s['wall_s']:.2f} s "
             f"({s['layouts_per_s']:,.0f} layouts/s, {s['evaluated_by']}), {fit}{folded}"]
    if not result.top:
        c = s.get("closest")
        lines.append("no layout fits" + (f"; closest: {c['label']}: {c['reason']}" if c else ""))
        return "\n".join(lines)
    tokens = s.get("tokens")
    with_tokens = tokens is not None
    cost_head = ["$/M tok"] + (["days", "total $"] if with_tokens else [])
    lines += ranking_lines(s)
    if with_tokens:
        b = s.get("budget") or {}
        lines.append(f"{tokens:.4g} tokens to train" + (f" ({b['source']})" if b.get("source") else "")
                     + (f", goodput {s['goodput_source']}" if s.get("goodput_source") else ""))
    rank_by = s.get("rank_by", "point")
    name, spec = OBJECTIVE_SHORT[s["objective"]]
    ranks = [] if rank_by == "point" else [f"{name} {END_NAMES[rank_by]}"]
    lines += decision_lines(s, wide)
    if not wide:
        lines += _top_lines(result, with_tokens, spec, ranks)
        lines.append("(plan --wide: the best of each stack and instance type, in full columns)")
    head = ["#", "layout", *ranks, "step s (80 % interval)", "replayed s", "tokens/s", "MFU", *cost_head, "HBM GiB",
            "off domain", "vs scenario's layout"]
    rows = []
    by_rank = {r["rank"]: r for r in s["replayed"]}
    for i, row in enumerate(result.top if wide else [], 1):
        rep = by_rank.get(i, {})
        rows.append([str(i), _label(row), *([fmt_number(row.get("rank_value"), spec)] if ranks else []),
                     band_text(row["step_time_s"], row.get("step_time_low_s"), row.get("step_time_high_s")),
                     fmt_number(rep.get("replay_step_time_s"), ".4g"), fmt_number(row["tokens_per_s"], ",.0f"), mfu_text(row),
                     *_cost_cells(row, with_tokens), _hbm(row), ",".join(row.get("extrapolated") or []) or "-",
                     row.get("vs_scenario") or "n/a"])
    if wide:
        lines += _columns(head, rows)
    if s["replayed"] and wide:
        lines.append("  the replayed layouts' intervals are their run's (around the replayed step)")
    per_stack = s.get("best_per_stack") or []
    if wide and len(per_stack) + len(s.get("stacks_without_a_layout") or {}) > 1:
        lines.append("best of each stack (fast path):")
        head = ["stack", "layout", *ranks, "step s (80 % interval)", "tokens/s", "MFU", *cost_head, "HBM GiB",
                "vs scenario's layout"]
        lines += _columns(head, [[row["stack"], _label(row), *([fmt_number(row.get("rank_value"), spec)] if ranks else []),
                                  band_text(row["step_time_s"], row.get("step_time_low_s"), row.get("step_time_high_s")),
                                  fmt_number(row["tokens_per_s"], ",.0f"), mfu_text(row), *_cost_cells(row, with_tokens),
                                  _hbm(row), row.get("vs_scenario") or "n/a"] for row in per_stack], left=(0, 1))
    for name, why in (s.get("stacks_without_a_layout") or {}).items():
        lines.append(f"  {name}: {why}")
    per_type = s.get("best_per_type") or []
    if per_type and wide:
        lines.append("best of each instance type (fast path):")
        head = ["instance", "layout", *ranks, "step s (80 % interval)", "tokens/s", "MFU", "$/hour", *cost_head,
                "HBM GiB", "off domain"]
        rows = []
        for row in per_type:
            price = row.get("cluster_usd_per_hour")
            rows.append([row["instance"], _label(row), *([fmt_number(row.get("rank_value"), spec)] if ranks else []),
                         band_text(row["step_time_s"], row.get("step_time_low_s"), row.get("step_time_high_s")),
                         fmt_number(row["tokens_per_s"], ",.0f"), mfu_text(row),
                         fmt_number(price, ",.2f") if price is not None else "no price",
                         *_cost_cells(row, with_tokens), _hbm(row), ",".join(row.get("extrapolated") or []) or "-"])
        lines += _columns(head, rows, left=(0, 1))
    where = []
    for rep in s["replayed"]:
        b = rep.get("breakdown") or {}
        step = rep.get("replay_step_time_s")
        if not b or not step:
            continue
        parts = ", ".join(f"{k.removesuffix('_s')} {100 * b[k] / step:.0f}%" for k in BREAKDOWN_KEYS
                          if b.get(k) and b[k] / step >= 0.005)
        where.append(f"  {rep['rank']}: {parts}")
    if where:
        lines += ["where the time goes (replayed):", *where]
    if s["replayed"] and not any(r.get("run_dir") for r in s["replayed"]):
        lines.append("a top layout's run directory (report.html, trace.json): ultracluster run <plan dir>/top-N.yaml "
                     "(or plan --keep-runs)")
    for note in s.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)
