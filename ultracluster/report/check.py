"""Run directory → the problems that break the output contract of docs/design.md ("Output contract").

`ultracluster check RUN_DIR` and the tests call `check_run_dir`. It reads the files as any other tool would
(`json` and `csv`, not the report package's readers), so it checks what a run wrote, not what the package
believes it wrote. Every finding is a `Problem`: the file and field, what
was found, what the contract allows.
"""
from __future__ import annotations

import csv
import itertools
import json
import math
import os
import re
from pathlib import Path

from ultracluster.errors import Problem
from ultracluster.errors import shorten_text
from ultracluster.scenario.checks import MAX_REPLAYED_STEPS
from ultracluster.yaml_input import InputError, load_json, open_regular, read_bounded

# What `check` reads, bounded like `report` reads a run directory (docs/design.md "Limits on what is read"):
# regular files only (a FIFO or a device is refused, never waited on), JSON and HTML at most 64 MiB, CSV 1 GiB.
MAX_JSON_BYTES, MAX_CSV_BYTES = 64 << 20, 1 << 30


def _text(path: Path, limit: int, what: str) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes (InputError, UnicodeError otherwise)."""
    return read_bounded(path, limit, what).decode("utf-8")

#: Files every run directory holds, feasible or not; summary.json is written last.
RUN_FILES = ("summary.json", "steps.csv", "breakdown.csv", "memory.csv", "collectives.csv", "timeline.csv",
             "ranks.csv", "stages.csv", "shards.csv", "trace.json", "report.html", "scenario.json", "run.json")

#: The parts of a step's time; each is exposed time on the critical path and together they make step_time_s.
BREAKDOWN = ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s", "data_stall_s", "checkpoint_s",
             "other_s")

#: summary.json fields: name -> kind. "number" is an int or float (NaN allowed only in an infeasible run);
#: "number?" may also be null (costs, when the instance price is unknown).
SUMMARY_FIELDS = {
    "scenario": "str", "feasible": "bool", "reason": "str?", "instance_type": "str", "instances": "int",
    "chips": "int", "neuron_cores": "int", "ranks": "int", "layout": "str", "ray_nodes": "int",
    "steps_replayed": "int", "steps_measured": "int", "step_time_s": "number", "tokens_per_s": "number",
    "seq_per_s": "number", "tokens_per_step": "int", "mfu": "number", "hbm_peak_gib": "number",
    **{k: "number" for k in BREAKDOWN}, "dp_comm_hidden_s": "number", "residual_s": "number", "straggler_cost_s": "number",
    "slowest_ranks": "list", "model_flops_per_step": "number", "peak_flop_per_s": "number",
    "price_per_hour_usd": "number?", "cost_per_step_usd": "number?", "usd_per_million_tokens": "number?",
    "payload_checked": "bool",
}

#: summary.json fields added since the first contract: checked when present (older run directories lack them).
#: Every collective kind's exposed and hidden seconds per step (tp, cp, ep in-layer; pp sends; dp), a rank's
#: HBM capacity, and the warnings (figures that are 0 because their model is off).
COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
OPTIONAL_FIELDS = {"hbm_capacity_gib": "number", **{f"comm_{k}_{p}_s": "number" for k in COMM_KINDS
                                                    for p in ("exposed", "hidden")}, "warnings": "list",
                   "calibration_profile": "str?", "cp_comm_s": "number", "ep_comm_s": "number",
                   "checkpoint_every_steps": "int",
                   # the training budget's days and dollars with goodput (docs/design.md, "summary.json")
                   "train_tokens": "number?", "train_steps": "number?", "goodput": "number",
                   "goodput_source": "str", "time_to_train_days": "number?", "total_cost_usd": "number?",
                   "price_source": "str",
                   # which goodput it is (closed form, or emulated by `run --hours` over goodput_hours), the wall
                   # step and tokens/s at it, and the stack that timed the run
                   "goodput_method": "str", "goodput_hours": "number", "wall_step_time_s": "number",
                   "wall_tokens_per_s": "number", "stack": "str",
                   # the file system: capacity, what it must hold, its price joining the total cost (docs/storage.md)
                   "storage_capacity_gb": "number", "dataset_gb": "number", "checkpoints_kept": "int",
                   "storage_needed_gb": "number", "storage_price_source": "str", "compute_cost_usd": "number?",
                   "storage_cost_usd": "number?"}
#: The in-layer kinds under the contract's names, beside tp_comm_s (which holds them): each equals its kind's
#: exposed seconds
KIND_NAMES = {"cp_comm_s": "comm_cp_exposed_s", "ep_comm_s": "comm_ep_exposed_s"}

#: The axes `extrapolated` may name (ultracluster.uncertainty.extrapolated)
EXTRAPOLATION_AXES = ("generation", "tp", "pp", "cp", "seq_len", "params_b", "zero", "recompute", "cell",
                      "tokens_per_core", "mfu")   # domain.GENERATION_RANGES: checked per chip generation

#: Columns of steps.csv the contract names (a run writes more); breakdown.csv has the same less the ids.
STEP_COLUMNS = ("step", "warmup", "step_time_s", *BREAKDOWN)

REL = 1e-6       # relative tolerance of the sums (they are exact up to float rounding)
EPS_US = 1e-6    # tolerance of the trace's nesting rule, in microseconds
NETWORK = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import\s""",
                     re.IGNORECASE)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def _check_summary(s: dict, problems: list[Problem]) -> None:
    for key, kind in {**SUMMARY_FIELDS, **OPTIONAL_FIELDS}.items():
        path = f"summary.json: {key}"
        if key not in s:
            if key in SUMMARY_FIELDS:
                problems.append(Problem(path, "<missing>", f"a {kind.rstrip('?')} field"))
            continue
        v = s[key]
        if kind == "str?":
            ok = v is None or isinstance(v, str)
        elif kind == "number?":
            ok = v is None or _is_number(v)
        else:
            ok = {"str": isinstance(v, str), "bool": isinstance(v, bool), "list": isinstance(v, list),
                  "int": isinstance(v, int) and not isinstance(v, bool), "number": _is_number(v)}[kind]
        if key == "warnings" and ok and not all(isinstance(w, str) and w.strip() for w in v):
            problems.append(Problem(path, v, "a list of one-line warnings (non-empty strings)"))
        if not ok:
            allowed = {"str?": "a string or null", "number?": "a number or null", "str": "a string",
                       "bool": "true or false", "list": "a list", "int": "an integer",
                       "number": "a number"}[kind]
            problems.append(Problem(path, v, allowed))


def _check_budget(s: dict, problems: list[Problem]) -> None:
    """The days and dollars (when present): goodput in [0, 1]; a cost exactly when the price is known, equal to
    days x 24 x instances x price plus the file system's (`storage_cost_usd`); the no-price hint where it is
    not."""
    good = s.get("goodput")
    if _is_number(good) and not 0 <= good <= 1:
        problems.append(Problem("summary.json: goodput", good, "a fraction of wall time in [0, 1]"))
    price, days, usd = s.get("price_per_hour_usd"), s.get("time_to_train_days"), s.get("total_cost_usd")
    if "price_source" in s and (price is None) != (s["price_source"].startswith("no price")):
        problems.append(Problem("summary.json: price_source", s["price_source"],
                                "where price_per_hour_usd comes from, or 'no price: ...' exactly when it is null"))
    fsx = s.get("storage_cost_usd") if _is_number(s.get("storage_cost_usd")) else 0.0
    if _is_number(days) and _is_number(price) and _is_number(usd) and \
            not _close(usd, days * 24 * s.get("instances", 0) * price + fsx):
        problems.append(Problem("summary.json: total_cost_usd", usd, "time_to_train_days x 24 x instances x "
                                                                     "price_per_hour_usd + storage_cost_usd"))
    if _is_number(s.get("compute_cost_usd")) and _is_number(usd) and not _close(usd, s["compute_cost_usd"] + fsx):
        problems.append(Problem("summary.json: total_cost_usd", usd, "compute_cost_usd + storage_cost_usd"))
    if usd is not None and price is None:
        problems.append(Problem("summary.json: total_cost_usd", usd, "null without a price"))


def _check_feasible_summary(s: dict, problems: list[Problem]) -> None:
    numbers = [k for k, kind in SUMMARY_FIELDS.items() if kind.startswith("number") and _is_number(s.get(k))]
    for k in numbers:
        if not math.isfinite(s[k]):
            problems.append(Problem(f"summary.json: {k}", s[k], "a finite number in a feasible run"))
    if s.get("reason") is not None:
        problems.append(Problem("summary.json: reason", s["reason"], "null in a feasible run"))
    step = s.get("step_time_s")
    if not (_is_number(step) and math.isfinite(step) and step > 0):
        return  # reported above; the rules below divide by it
    mfu = s.get("mfu")
    if _is_number(mfu) and not 0 < mfu <= 1:
        problems.append(Problem("summary.json: mfu", mfu, "a fraction of peak in (0, 1]"))
    hfu = s.get("hfu")
    if _is_number(hfu) and _is_number(mfu) and math.isfinite(hfu) and not mfu <= hfu * (1 + REL) <= 1 + REL:
        problems.append(Problem("summary.json: hfu", hfu, f"at least mfu = {mfu!r} and at most 1"))
    # the 80 % interval (docs/uncertainty.md): optional for run directories written before it existed
    for low_key, point_key, high_key in (("step_time_low_s", "step_time_s", "step_time_high_s"),
                                         ("tokens_per_s_low", "tokens_per_s", "tokens_per_s_high")):
        low, point, high = s.get(low_key), s.get(point_key), s.get(high_key)
        if low is None and high is None:
            continue
        if not all(_is_number(v) and math.isfinite(v) for v in (low, point, high)) or not (
                0 < low * (1 - REL) <= point <= high * (1 + REL)):
            problems.append(Problem(f"summary.json: {low_key}, {high_key}", [low, high],
                                    f"finite, positive and around {point_key} = {point!r} (low <= point <= high)"))
    parts = [s.get(k) for k in BREAKDOWN]
    if all(_is_number(p) and math.isfinite(p) for p in parts):
        for k, p in zip(BREAKDOWN, parts):
            if p < 0:
                problems.append(Problem(f"summary.json: {k}", p, "a time >= 0"))
        if not _close(math.fsum(parts), step):
            problems.append(Problem("summary.json: " + " + ".join(BREAKDOWN), math.fsum(parts),
                                    f"the sum step_time_s = {step!r}"))
    _check_comm(s, step, problems)
    _check_budget(s, problems)
    peak, cap = s.get("hbm_peak_gib"), s.get("hbm_capacity_gib")
    if _is_number(peak) and _is_number(cap) and math.isfinite(cap) and peak > cap * (1 + REL):
        problems.append(Problem("summary.json: hbm_peak_gib", peak, f"at most hbm_capacity_gib = {cap!r} in a "
                                                                    f"feasible run"))
    tokens, step_tokens = s.get("tokens_per_s"), s.get("tokens_per_step")
    if _is_number(tokens) and isinstance(step_tokens, int) and not _close(tokens * step, step_tokens):
        problems.append(Problem("summary.json: tokens_per_s", tokens,
                                f"tokens_per_step / step_time_s = {step_tokens / step!r}"))
    # where the evidence ends (docs/uncertainty.md): optional for run directories written before it existed
    ext = s.get("extrapolated")
    if ext is not None and not (isinstance(ext, list) and all(a in EXTRAPOLATION_AXES for a in ext)):
        problems.append(Problem("summary.json: extrapolated", ext, f"a list of axes among {', '.join(EXTRAPOLATION_AXES)}"))
    if s.get("mfu_implausible") not in (None, True, False):
        problems.append(Problem("summary.json: mfu_implausible", s.get("mfu_implausible"), "true or false"))
    measured, replayed = s.get("steps_measured"), s.get("steps_replayed")
    if isinstance(measured, int) and isinstance(replayed, int) and not 1 <= measured <= replayed:
        problems.append(Problem("summary.json: steps_measured", measured,
                                f"between 1 and steps_replayed ({replayed}) in a feasible run"))


def _check_comm(s: dict, step: float, problems: list[Problem]) -> None:
    """The kinds' seconds (when present): finite, >= 0 (to float noise of the step), the in-layer kinds' exposed
    seconds adding up to `tp_comm_s`, pp's and dp's equal to `pp_comm_s` and `dp_comm_s`, dp's hidden to
    `dp_comm_hidden_s`."""
    keys = [k for k in OPTIONAL_FIELDS if k.startswith("comm_")]
    values = {k: s.get(k) for k in keys}
    if all(v is None for v in values.values()):
        return
    if not all(_is_number(v) and math.isfinite(v) for v in values.values()):
        problems.append(Problem("summary.json: " + ", ".join(k for k, v in values.items() if not (
            _is_number(v) and math.isfinite(v))), "missing or not finite", "every kind's exposed and hidden "
                                                                            "seconds, finite, in a feasible run"))
        return
    for k, v in values.items():
        if v < -REL * step:
            problems.append(Problem(f"summary.json: {k}", v, "a time >= 0"))
    sums = (("comm_tp_exposed_s + comm_cp_exposed_s + comm_ep_exposed_s", "tp_comm_s",
             values["comm_tp_exposed_s"] + values["comm_cp_exposed_s"] + values["comm_ep_exposed_s"]),
            ("comm_pp_exposed_s", "pp_comm_s", values["comm_pp_exposed_s"]),
            ("comm_dp_exposed_s", "dp_comm_s", values["comm_dp_exposed_s"]),
            ("comm_dp_hidden_s", "dp_comm_hidden_s", values["comm_dp_hidden_s"]))
    for name, part, total in sums:
        if _is_number(s.get(part)) and abs(total - s[part]) > REL * step:
            problems.append(Problem(f"summary.json: {name}", total, f"{part} = {s[part]!r}"))
    for name, kind in KIND_NAMES.items():
        if name in s and not (_is_number(s[name]) and abs(s[name] - values[kind]) <= REL * step):
            problems.append(Problem(f"summary.json: {name}", s[name], f"{kind} = {values[kind]!r} (its exposed "
                                                                      "seconds, part of tp_comm_s)"))


def _read_csv(run: Path, name: str, problems: list[Problem], max_rows: int = MAX_REPLAYED_STEPS,
              why: str = "") -> tuple[list[str], list[dict]] | None:
    """A table's header and rows, read a line at a time and refused past `max_rows` rows (so that neither memory
    nor time follows the file's size: a table of one row per replayed step has at most the run's steps)."""
    import io
    try:
        with open_regular(run / name, MAX_CSV_BYTES, "CSV file") as raw, \
                io.TextIOWrapper(raw, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = list(itertools.islice(reader, max_rows + 1))
            if len(rows) > max_rows:
                problems.append(Problem(f"{name}: rows", f"more than {max_rows:,}",
                                        why or f"at most {max_rows:,} rows"))
                return None
            return list(reader.fieldnames or []), rows
    except InputError as err:
        problems.append(Problem(name, err.reason or err.given, err.allowed))
        return None
    except (OSError, UnicodeError, csv.Error) as err:
        problems.append(Problem(name, f"unreadable ({shorten_text(str(err), 160)})", "a CSV file with a header row"))
        return None


def _floats(row: dict, cols: tuple[str, ...], where: str, problems: list[Problem]) -> list[float] | None:
    try:
        return [float(row[c]) for c in cols]
    except (TypeError, ValueError):
        problems.append(Problem(where, {c: row.get(c) for c in cols}, "numbers"))
        return None


def _check_steps(run: Path, s: dict, problems: list[Problem]) -> None:
    tables = {}
    replayed = s.get("steps_replayed")
    most = replayed if type(replayed) is int and 0 <= replayed <= MAX_REPLAYED_STEPS else MAX_REPLAYED_STEPS
    for name, cols in (("steps.csv", STEP_COLUMNS), ("breakdown.csv", STEP_COLUMNS)):
        read = _read_csv(run, name, problems, most, f"one per replayed step (summary.json's steps_replayed: "
                                                    f"{replayed})" if most == replayed else "")
        if read is None:
            continue
        header, rows = read
        missing = [c for c in cols if c not in header]
        if missing:
            problems.append(Problem(f"{name}: columns", missing, "present: " + ", ".join(cols)))
            continue
        tables[name] = rows
        replayed = s.get("steps_replayed")
        if isinstance(replayed, int) and len(rows) != replayed:
            problems.append(Problem(f"{name}: rows", len(rows), f"one per replayed step (steps_replayed = {replayed})"))
        for i, row in enumerate(rows):
            where = f"{name}: row {i + 1} (step {row.get('step')})"
            values = _floats(row, ("step_time_s", *BREAKDOWN), where, problems)
            if values is None:
                continue
            step, parts = values[0], values[1:]
            if any(p < 0 for p in parts):
                problems.append(Problem(where, dict(zip(BREAKDOWN, parts)), "every part >= 0"))
            if not _close(math.fsum(parts), step):
                problems.append(Problem(f"{where}: sum of the breakdown", math.fsum(parts),
                                        f"step_time_s = {step!r}"))
            if row.get("warmup") not in ("True", "False"):
                problems.append(Problem(f"{where}: warmup", row.get("warmup"), "True or False"))
    steps, breakdown = tables.get("steps.csv"), tables.get("breakdown.csv")
    if steps is not None and breakdown is not None and len(steps) == len(breakdown):
        for a, b in zip(steps, breakdown):
            if any(a[c] != b[c] for c in STEP_COLUMNS):
                problems.append(Problem(f"breakdown.csv: step {b.get('step')}", {c: b[c] for c in STEP_COLUMNS},
                                        "the same values as its row of steps.csv"))
                break
    if steps and s.get("feasible") is True and _is_number(s.get("step_time_s")):
        measured = [r for r in steps if r.get("warmup") == "False"] or steps
        try:
            mean = math.fsum(float(r["step_time_s"]) for r in measured) / len(measured)
        except ValueError:
            return  # reported per row above
        if not _close(mean, s["step_time_s"]):
            problems.append(Problem("summary.json: step_time_s", s["step_time_s"],
                                    f"the mean of the measured steps of steps.csv = {mean!r}"))


def _check_trace(run: Path, feasible: bool, problems: list[Problem]) -> None:
    try:
        trace = load_json(_text(run / "trace.json", MAX_JSON_BYTES, "JSON file"), "trace.json")
    except InputError as err:
        problems.append(Problem("trace.json", err.reason or err.given, err.allowed))
        return
    except (OSError, UnicodeError, ValueError) as err:
        problems.append(Problem("trace.json", f"unreadable ({err})", "Chrome trace-event JSON"))
        return
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        problems.append(Problem("trace.json: traceEvents", type(events).__name__, "a list of trace events"))
        return
    tracks: dict[tuple, list[tuple[float, float]]] = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "ph" not in e:
            problems.append(Problem(f"trace.json: traceEvents[{i}]", e, "an event object with a 'ph' phase"))
            return
        if e["ph"] != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur", 0)
        if not (_is_number(ts) and _is_number(dur) and math.isfinite(ts) and math.isfinite(dur) and dur >= 0):
            problems.append(Problem(f"trace.json: traceEvents[{i}] ({e.get('name')})", {"ts": ts, "dur": dur},
                                    "a finite ts (us) and a duration >= 0"))
            return
        tracks.setdefault((e.get("pid"), e.get("tid")), []).append((ts, ts + dur))
    if feasible and not tracks:
        problems.append(Problem("trace.json", "no complete ('X') slices", "the slices of the replayed steps"))
    for (pid, tid), spans in tracks.items():
        # Perfetto draws one track per (pid, tid): slices on it must nest or be disjoint, never cross.
        spans.sort(key=lambda sp: (sp[0], -sp[1]))
        open_spans: list[tuple[float, float]] = []
        for start, end in spans:
            while open_spans and open_spans[-1][1] <= start + EPS_US:
                open_spans.pop()
            if open_spans and end > open_spans[-1][1] + EPS_US:
                outer = open_spans[-1]
                problems.append(Problem(f"trace.json: track pid {pid} tid {tid}",
                                        f"slice [{start}, {end}] us crosses [{outer[0]}, {outer[1]}] us",
                                        "slices on one track nested or disjoint"))
                break
            open_spans.append((start, end))


def _check_html(run: Path, scenario: object, problems: list[Problem]) -> None:
    try:
        html = _text(run / "report.html", MAX_JSON_BYTES, "HTML file")
    except (OSError, UnicodeError, InputError) as err:
        problems.append(Problem("report.html", f"unreadable ({err})", "an HTML page"))
        return
    if not html.lstrip().lower().startswith("<!doctype html"):
        problems.append(Problem("report.html", html.lstrip()[:40], "an HTML page starting with <!DOCTYPE html>"))
    found = NETWORK.search(html)
    if found:
        problems.append(Problem("report.html", html[max(0, found.start() - 20):found.end() + 40],
                                "an offline page: no script, style, image or link loaded from the network"))
    if isinstance(scenario, str) and scenario not in html:
        problems.append(Problem("report.html", "no scenario name", f"a page naming the scenario {scenario!r}"))


def _read_json(run: Path, name: str, problems: list[Problem]) -> dict | None:
    try:
        value = load_json(_text(run / name, MAX_JSON_BYTES, "JSON file"), name)
    except InputError as err:
        problems.append(Problem(name, err.reason or err.given, err.allowed))
        return None
    except (OSError, UnicodeError, ValueError) as err:
        problems.append(Problem(name, f"unreadable ({err})", "a JSON object"))
        return None
    if not isinstance(value, dict):
        problems.append(Problem(name, type(value).__name__, "a JSON object"))
        return None
    return value


def check_run_dir(run_dir: str | os.PathLike) -> list[Problem]:
    """Check a run directory against the output contract.

    Args:
        run_dir: a directory written by `ultracluster run` (or by `write_run_dir`).

    Returns:
        Every problem found, in file order; empty when the directory meets the contract.

    Raises:
        NotADirectoryError: `run_dir` is not a directory (bad input, not a finding).
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise NotADirectoryError(str(run))
    problems: list[Problem] = []
    missing = [f for f in RUN_FILES if not (run / f).is_file()]
    if missing:
        problems.append(Problem("files", "missing: " + ", ".join(missing), "every file of: " + ", ".join(RUN_FILES)))
    if "summary.json" in missing:
        return problems
    s = _read_json(run, "summary.json", problems)
    if s is None:
        return problems
    _check_summary(s, problems)
    feasible = s.get("feasible") is True
    if feasible:
        _check_feasible_summary(s, problems)
    elif s.get("feasible") is False and not (isinstance(s.get("reason"), str) and s["reason"].strip()):
        problems.append(Problem("summary.json: reason", s.get("reason"), "why the layout cannot run, in an "
                                                                         "infeasible run"))
    if "steps.csv" not in missing and "breakdown.csv" not in missing:
        _check_steps(run, s, problems)
    if "trace.json" not in missing:
        _check_trace(run, feasible, problems)
    if "report.html" not in missing:
        _check_html(run, s.get("scenario"), problems)
    if "scenario.json" not in missing:
        sc = _read_json(run, "scenario.json", problems)
        if sc is not None and sc.get("name") != s.get("scenario"):
            problems.append(Problem("scenario.json: name", sc.get("name"),
                                    f"the summary's scenario {s.get('scenario')!r}"))
    if "run.json" not in missing:
        _read_json(run, "run.json", problems)
    if (run / "goodput.json").is_file():
        _check_one_goodput(s, _read_json(run, "goodput.json", problems), problems)
    return problems


def _check_one_goodput(s: dict, g: dict | None, problems: list[Problem]) -> None:
    """`run --hours`: summary.json's headline goodput is the long run's (goodput.json's), and says so."""
    if g is None or "goodput" not in s or "goodput_method" not in s:
        return          # a run directory from before the one goodput: nothing to compare
    if s["goodput_method"] != "emulated":
        problems.append(Problem("summary.json: goodput_method", s["goodput_method"],
                                "emulated, beside goodput.json (the run's long run)"))
    a, b = s.get("goodput"), g.get("goodput")
    if _is_number(a) and _is_number(b) and not (_close(a, b) or (math.isnan(a) and math.isnan(b))):
        problems.append(Problem("summary.json: goodput", a, f"goodput.json's goodput {b!r} (one goodput per run)"))
