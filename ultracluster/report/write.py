"""Report → run directory: atomic files (`report.atomic`: temp file in the same directory, fsync, os.replace).

The one module of the package that writes run files: the tables (CSV, `report.atomic.write_tables`, which
`Report.to_csv`/`to_parquet` call too), summary.json, run.json, scenario.json, trace.json and report.html
(`write_run_dir`, `render_run_dir`), the long run's goodput.json, failures.csv and time_lost.csv
(`write_goodput`), the sensitivity files (`write_sensitivity`) and compare.html. A reader never sees a
half-written file, and a run interrupted after k steps leaves a steps.csv with exactly those k rows
(`StepWriter`).
"""
from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ultracluster.replay.result import StepRecord
from ultracluster.report.atomic import atomic_write_text, write_tables
from ultracluster.report.html import render_compare_html, render_html, sensitivity_html
from ultracluster.report.compare import compare_keys, numeric_difference
from ultracluster.report.trace import chrome_trace

if TYPE_CHECKING:
    from ultracluster.goodput import GoodputResult
    from ultracluster.report.frames import Report

STEP_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(StepRecord))


def write_run_dir(report: Report, out_dir: str | os.PathLike) -> Path:
    """Write a run directory: the CSV tables, scenario.json, trace.json, report.html, then summary.json.

    summary.json is written last, so its presence marks a complete run directory.

    Args:
        report: the built report.
        out_dir: the run directory; created with its parents when missing.

    Returns:
        The run directory.
    """
    out = Path(out_dir)
    write_tables(report.tables(), out, "csv")
    write_run_record(out, report.emulation)
    atomic_write_text(out / "scenario.json", json.dumps(report.scenario, indent=2, default=str) + "\n")
    render_run_dir(report, out)
    atomic_write_text(out / "summary.json", json.dumps(report.summary, indent=2) + "\n")
    return out


def write_run_record(out_dir: str | os.PathLike, record: dict) -> Path:
    """Write run.json: how the run was emulated (`Report.emulation`), or what ended an unfinished run
    (`report.rundir.RunDirectory`)."""
    return atomic_write_text(Path(out_dir) / "run.json", json.dumps(record, indent=2) + "\n")


def write_goodput(result: GoodputResult, out_dir: str | os.PathLike) -> dict:
    """Write the long run's files into a run directory: goodput.json (`GoodputResult.summary` and `warnings`:
    one line per figure that is 0 only because its model is off), failures.csv
    (one row per failure) and time_lost.csv (useful time and each cause: seconds, hours, fraction).

    Returns:
        goodput.json's content.
    """
    from ultracluster.goodput import Failure

    from ultracluster.report.summary import goodput_warnings

    out = Path(out_dir)
    s = result.summary()
    s["warnings"] = goodput_warnings(s)
    atomic_write_text(out / "goodput.json", json.dumps(s, indent=2) + "\n")
    cols = [f.name for f in fields(Failure)]
    atomic_write_text(out / "failures.csv", pd.DataFrame(result.failure_rows(), columns=cols).to_csv(index=False))
    lost = pd.DataFrame({"cause": ["useful", *[k.removesuffix("_s") for k in s["lost_s"]]],
                         "seconds": [s["useful_s"], *s["lost_s"].values()]})
    lost["hours"], lost["fraction"] = lost["seconds"] / 3600, lost["seconds"] / s["wall_s"]
    atomic_write_text(out / "time_lost.csv", lost.to_csv(index=False))
    return s


SENSITIVITY_FILES = ("sensitivity.csv", "sensitivity.html")


def write_sensitivity(out_dir: str | os.PathLike, scenario_name: str, point_s: float, low_s: float, high_s: float,
                      rows: list[dict], columns: Sequence[str]) -> tuple[Path, Path]:
    """Write sensitivity.csv (one row per uncertain factor, `columns`) and sensitivity.html (the tornado
    page, `html.sensitivity_html`) into `out_dir`, created when missing.

    Returns:
        (the CSV's path, the page's path).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return (atomic_write_text(out / "sensitivity.csv", buf.getvalue()),
            atomic_write_text(out / "sensitivity.html", sensitivity_html(scenario_name, point_s, low_s, high_s, rows)))


def render_run_dir(report: Report, out_dir: str | os.PathLike) -> Path:
    """(Re)write the rendered views of a run directory, trace.json and report.html, from the report.

    Args:
        report: the built report, or one read back with `Report.from_run_dir` (`ultracluster report`).
        out_dir: the run directory; it must exist.

    Returns:
        The run directory.
    """
    out = Path(out_dir)
    atomic_write_text(out / "trace.json", json.dumps(chrome_trace(report)))
    atomic_write_text(out / "report.html", render_html(report))
    return out


def write_compare_html(runs: list, path: str | os.PathLike) -> Path:
    """Write the comparison page of several runs (see `render_compare_html`) and, beside it, compare.csv
    (`compare_frame`: the full table), atomically.

    Args:
        runs: (label, Report) pairs; the first is the baseline.
        path: the HTML file; its directory is created when missing.

    Returns:
        The page's path (compare.csv is `path.parent / "compare.csv"`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path.parent / "compare.csv", compare_frame(runs).to_csv(index=False))
    return atomic_write_text(path, render_compare_html(runs))


def compare_frame(runs: list) -> pd.DataFrame:
    """The full comparison as a table (compare.csv): one row per summary field of any run (the terminal's
    fields first), a column of full-precision values per run (lists as JSON) and, for each run after the
    first, `<label> - <first>` (the difference: 0 within float noise, `table.REL_ZERO`; empty for text) and
    `<label> / <first> - 1` (the relative difference)."""
    summaries = [rep.summary for _, rep in runs]
    keys = list(dict.fromkeys([*compare_keys(summaries), *(k for s in summaries for k in s)]))
    base_label, base = runs[0][0], summaries[0]
    cols: dict[str, list] = {"field": keys}
    for i, ((label, _), s) in enumerate(zip(runs, summaries)):
        cols[label] = [json.dumps(s.get(k)) if isinstance(s.get(k), (list, dict)) else s.get(k) for k in keys]
        if i:
            diffs = [numeric_difference(k, base, s) for k in keys]
            cols[f"{label} - {base_label}"] = [d for d, _ in diffs]
            cols[f"{label} / {base_label} - 1"] = [r for _, r in diffs]
    return pd.DataFrame(cols)


class StepWriter:
    """Keeps `out_dir/steps.csv` current while steps are replayed: one atomic rewrite per finished step.

    Args:
        out_dir: the run directory; created on the first append when missing.
        columns: StepRecord fields to write, in order; all of them by default.
    """

    def __init__(self, out_dir: str | os.PathLike, columns: Sequence[str] | None = None):
        self.path = Path(out_dir) / "steps.csv"
        self.columns = list(columns or STEP_COLUMNS)
        self.rows: list[list] = []

    def append(self, record: StepRecord) -> None:
        """Add one finished step and rewrite steps.csv with every step so far (`rows` counts a step once
        the file holds it: an interrupt during the write leaves both at the previous step)."""
        rows = [*self.rows, [getattr(record, c) for c in self.columns]]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, pd.DataFrame(rows, columns=self.columns).to_csv(index=False))
        self.rows = rows
