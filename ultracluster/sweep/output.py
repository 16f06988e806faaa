"""A sweep's rows → its table (one row per variant), the sweep directory's files and the terminal table.

Files (written atomically, `report.atomic`): sweep.csv and, where pyarrow is installed (the `parquet` and `test`
extras), sweep.parquet (the table), sweep.json (what was swept,
how, and whether it finished), sweep.html (`sweep.html`), and sweep-rows.jsonl, each finished row as it ends (the
rows an interrupted sweep keeps and a rerun skips). The terminal table fits in 100 columns.
"""
from __future__ import annotations

import io
import json
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import OutDirError, shorten_text
from ..report.atomic import atomic_write_bytes, atomic_write_text
from ..yaml_input import InputError, load_json
from .evaluate import FIGURES, WARNING_JOIN
from .spec import MAX_SWEEP_VARIANTS

ROWS_FILE = "sweep-rows.jsonl"
SWEEP_FILES = {"sweep.csv", "sweep.parquet", "sweep.json", "sweep.html", ROWS_FILE}
WIDTH = 100                     # the terminal table's columns at most


MAX_ROWS = MAX_SWEEP_VARIANTS       # a sweep writes one row per variant, and holds at most this many
MAX_ROW_BYTES = 256 << 10           # a row is about 1.3 KiB (its warnings and reasons in words)


def read_rows(path: Path) -> list[dict]:
    """The rows of sweep-rows.jsonl (a line cut by a kill is skipped), read a line at a time: a file of more rows
    than a sweep holds (`MAX_ROWS`) or a line longer than any row (`MAX_ROW_BYTES`) is not a sweep's (edited,
    or another program's), and is refused (OutDirError naming it) in bounded time and memory."""
    if not path.is_file():
        return []
    with open(path, "rb") as f:          # the bounds first, without parsing a row
        for n, line in enumerate(iter(lambda: f.readline(MAX_ROW_BYTES + 1), b"")):
            if n >= MAX_ROWS or len(line) > MAX_ROW_BYTES:
                why = (f"more than {MAX_ROWS:,} rows" if n >= MAX_ROWS else
                       f"a line (line {n + 1}) longer than {MAX_ROW_BYTES >> 10} KiB")
                raise OutDirError(f"sweep directory {shorten_text(str(path.parent))}: its {ROWS_FILE} holds {why}, "
                                  f"more than a sweep writes: it is not a sweep's rows; remove it or choose another "
                                  f"--out")
    rows = []
    with open(path, "rb") as f:
        for line in iter(lambda: f.readline(MAX_ROW_BYTES + 1), b""):
            try:
                rec = load_json(line.decode("utf-8"), ROWS_FILE)
            except (ValueError, InputError):
                continue
            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                rows.append(rec)
    return rows


def table(rows: list[dict], keys: list[str]) -> pd.DataFrame:
    """The sweep table: `variant`, a column per varied key, the figures (`evaluate.FIGURES`), `key`; in variant
    order."""
    cols = ["variant", *keys, *FIGURES, "key"]
    frame = pd.DataFrame([{c: r.get(c) for c in cols} for r in sorted(rows, key=lambda r: r["variant"])],
                         columns=cols)
    for c in FIGURES:
        if c in ("status", "reason", "goodput_method", "goodput_source", "price_source", "extrapolated", "warnings",
                 "assumptions"):
            frame[c] = frame[c].astype(object)
        elif c in ("feasible", "mfu_implausible"):
            frame[c] = frame[c].fillna(False).astype(bool)
        else:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    frame["variant"] = frame["variant"].astype(int)
    for k in keys:                 # each value as given (4.8 and 48, not 48.0)
        frame[k] = pd.Series([r.get(k) for r in sorted(rows, key=lambda r: r["variant"])], dtype=object)
    return frame


def _parquet_safe(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Varied-key columns of mixed kinds (numbers and words) as text: Parquet holds one kind per column."""
    out = frame.copy()
    for k in keys:
        kinds = {type(v) for v in out[k] if v is not None}
        if len(kinds - {int, float}) and len(kinds) > 1 or kinds & {dict, list}:
            out[k] = out[k].map(lambda v: json.dumps(v) if isinstance(v, (dict, list)) else str(v))
    return out


NO_PARQUET = ("sweep.parquet not written: pyarrow is not installed (pip install 'ultracluster[parquet]'); "
              "sweep.csv holds the same table")


def parquet_engine() -> bool:
    """Whether pandas can write Parquet here: pyarrow is installed (the `parquet` and `test` extras; the README's
    plain install has none)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def table_files() -> list[str]:
    """The sweep table's files on this install: sweep.csv, and sweep.parquet where pyarrow is installed."""
    return ["sweep.csv", "sweep.parquet"] if parquet_engine() else ["sweep.csv"]


def write_sweep_dir(out: Path, frame: pd.DataFrame, summary: dict, plan, html: bool = True) -> None:
    """sweep.csv, sweep.parquet (where pyarrow is installed; else an earlier sweep's is removed, so that no file
    disagrees with sweep.csv), sweep.html (with `html`) and last sweep.json."""
    atomic_write_text(out / "sweep.csv", frame.to_csv(index=False))
    if parquet_engine():
        buf = io.BytesIO()
        _parquet_safe(frame, plan.keys).to_parquet(buf, index=False)
        atomic_write_bytes(out / "sweep.parquet", buf.getvalue())
    else:
        (out / "sweep.parquet").unlink(missing_ok=True)
    if html:
        from .html import sweep_html
        atomic_write_text(out / "sweep.html", sweep_html(frame, summary, plan.keys))
    atomic_write_text(out / "sweep.json", json.dumps(_clean(summary), indent=2) + "\n")


def _clean(v):
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    return None if isinstance(v, float) and not math.isfinite(v) else v


def short_key(key: str, width: int = 14) -> str:
    """A varied key as a column header: its last part, cut to `width`."""
    last = key.rsplit(".", 1)[-1]
    return last if len(last) <= width else last[:width - 1] + "…"


def _num(v, digits: int = 3) -> str:
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def _value(v) -> str:
    text = json.dumps(v) if isinstance(v, (dict, list)) else str(v).lower() if isinstance(v, bool) else str(v)
    return text if len(text) <= 16 else text[:15] + "…"


# terminal column -> the sweep.csv column that holds it (a column not shown for width is named by its csv name)
CSV_NAMES = {"step s (80 %)": "step_time_s", "goodput": "goodput", "wall step s": "wall_step_time_s",
             "wall tok/s": "wall_tokens_per_s", "days (80 %)": "time_to_train_days", "cost $": "total_cost_usd",
             "tokens/s": "tokens_per_s", "MFU": "mfu", "warn": "warnings"}
# which optional columns the terminal keeps first when the width runs out (they are shown in the table's order):
# the step, goodput, days and dollars a decision needs, then the warnings' marks (the footnotes need them)
PRIORITY = ("step s (80 %)", "goodput", "days (80 %)", "cost $", "warn", "wall tok/s", "wall step s", "tokens/s",
            "MFU")


def _marks(ids: list[int]) -> str:
    """Footnote numbers as runs: [1, 2, 3, 5] -> "1-3,5"."""
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if j == i else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def format_sweep(frame: pd.DataFrame, summary: dict, keys: list[str], width: int = WIDTH) -> str:
    """The sweep as a table of at most `width` columns: the varied values, step time with its 80 % interval,
    goodput (with `--hours`, the wall-clock step and tokens/s at that goodput beside it), days and cost to train,
    tokens/s, MFU and a mark per warning ("1-3,5"). Columns that do not fit are dropped in the reverse of
    `PRIORITY` and named under the table ("not shown for width: tokens_per_s, mfu; all in sweep.csv"). Then the
    warnings as footnotes (only with the marks column shown, so every footnote has a row pointing to it; without
    it one line counts them), the infeasible variants' reasons and the failures, each once."""
    warn_ids: dict[str, int] = {}
    marks = []
    for w in frame["warnings"].fillna(""):
        ids = sorted({warn_ids.setdefault(part, len(warn_ids) + 1)
                      for part in str(w).split(WARNING_JOIN) if part})
        marks.append(_marks(ids))
    cols: list[tuple[str, list[str], bool]] = [("#", [str(v) for v in frame["variant"]], True)]
    cols += [(short_key(k), [_value(v) for v in frame[k]], False) for k in keys]

    def cell(r, col, low, high, scale=1.0, pct=False):
        v = r[col]
        if r["status"] == "failed":
            return "failed"
        if not r["feasible"]:
            return "infeasible" if col == "step_time_s" else "-"
        if pct:
            return f"{100 * v:.2f} %" if isinstance(v, float) and math.isfinite(v) else "-"
        text = _num(v * scale)
        if low and isinstance(r.get(low), float) and math.isfinite(r[low]):
            text += f" ({_num(r[low] * scale)}–{_num(r[high] * scale)})"
        return text

    rows = [r for _, r in frame.iterrows()]
    optional = [
        ("step s (80 %)", [cell(r, "step_time_s", "step_time_low_s", "step_time_high_s") for r in rows]),
        ("goodput", [cell(r, "goodput", None, None, pct=True) for r in rows]),
        *([("wall step s", [cell(r, "wall_step_time_s", None, None) for r in rows]),     # at the long run's goodput
           ("wall tok/s", [cell(r, "wall_tokens_per_s", None, None) for r in rows])] if summary.get("hours") else []),
        ("days (80 %)", [cell(r, "time_to_train_days", "time_to_train_low_days", "time_to_train_high_days")
                         for r in rows]),
        ("cost $", [("no price" if r["feasible"] and r["status"] == "ok" and isinstance(r["time_to_train_days"], float)
                     and math.isfinite(r["time_to_train_days"]) and not math.isfinite(r["total_cost_usd"])
                     else cell(r, "total_cost_usd", None, None)) for r in rows]),
        ("tokens/s", [cell(r, "tokens_per_s", None, None) for r in rows]),
        ("MFU", [cell(r, "mfu", None, None, pct=True) for r in rows]),
        *([("warn", marks)] if warn_ids else []),
    ]
    no_budget = bool(frame["time_to_train_days"].isna().all())
    if no_budget:
        optional = [c for c in optional if c[0] not in ("days (80 %)", "cost $")]
    by_head = dict((h, v) for h, v in optional)
    kept: set[str] = set()
    for head in PRIORITY:          # the most wanted first; each shown where it stands in the table's order
        if head in by_head and _width(cols + [(h, by_head[h], False) for h, _ in optional
                                              if h in kept or h == head]) <= width:
            kept.add(head)
    dropped = [h for h, _ in optional if h not in kept]
    cols = cols + [(h, v, False) for h, v in optional if h in kept]
    while _width(cols) > width and len(cols) > 2:     # many varied keys: cut their values
        cols = [(h, [v[:max(4, len(v) - 2)] for v in vals], right) for h, vals, right in cols]
    widths = [max(len(h), *(len(v) for v in vals)) if vals else len(h) for h, vals, _ in cols]
    lines = ["  ".join(h.rjust(w) for (h, _, _), w in zip(cols, widths)).rstrip()]
    for i in range(len(frame)):
        lines.append("  ".join(vals[i].rjust(w) for (_, vals, _), w in zip(cols, widths)).rstrip())
    head = (f"sweep {summary.get('scenario')}: {len(frame)} of {summary.get('variants')} variants"
            f" ({'zip' if summary.get('zip') else 'grid'} of {', '.join(keys)})"
            + (f", {summary['hours']:g} h each" if summary.get("hours") else "")
            + f", assumptions {summary.get('assumptions', 'on')}")
    out = textwrap.wrap(head, width) + lines
    if dropped:
        out += textwrap.wrap("not shown for width: " + ", ".join(CSV_NAMES[h] for h in dropped)
                             + "; all in sweep.csv", width, subsequent_indent="    ")
    if no_budget and len(frame):
        out.append("days and dollars: set training.budget_tokens (or --tokens) to see them")
    elif "no price" in [v for _, vals, _ in cols for v in vals]:
        out.append("no price: set cluster.price_per_hour_usd or --price-per-hour")
    if "warn" in kept:
        for text, i in warn_ids.items():
            out += textwrap.wrap(f"[{i}] {text}", width, subsequent_indent="    ")
    elif warn_ids:
        hit = int((frame["warnings"].fillna("") != "").sum())
        out += textwrap.wrap(f"{len(warn_ids)} distinct warning{'s' * (len(warn_ids) > 1)} on {hit} of "
                             f"{len(frame)} variants, in sweep.csv's warnings column (no room for their marks here)",
                             width, subsequent_indent="    ")
    for _, r in frame[frame["status"] == "infeasible"].iterrows():
        out += textwrap.wrap(f"#{int(r['variant'])} infeasible: {r['reason']}", width, subsequent_indent="    ")
    for line in summary.get("failures") or []:
        out += textwrap.wrap(line, width, subsequent_indent="    ")
    return "\n".join(out)


def _width(cols) -> int:
    widths = [max([len(h)] + [len(v) for v in vals]) for h, vals, _ in cols]
    return sum(widths) + 2 * (len(widths) - 1)
