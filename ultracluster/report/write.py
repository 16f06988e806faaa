"""Report → run directory: atomic files (`report.atomic`: temp file in the same directory, fsync, os.replace).

The only module of the package that writes report files. A reader never sees a half-written file, and a run
interrupted after k steps leaves a steps.csv with exactly those k rows (`StepWriter`).
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ultracluster.replay.events import StepRecord
from ultracluster.report.atomic import atomic_write_bytes, atomic_write_text  # noqa: F401 (re-exported)
from ultracluster.report.html import render_compare_html, render_html
from ultracluster.report.trace import chrome_trace

if TYPE_CHECKING:
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
    report.to_csv(out)
    atomic_write_text(out / "run.json", json.dumps(report.emulation, indent=2) + "\n")
    atomic_write_text(out / "scenario.json", json.dumps(report.scenario, indent=2, default=str) + "\n")
    render_run_dir(report, out)
    atomic_write_text(out / "summary.json", json.dumps(report.summary, indent=2) + "\n")
    return out


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
    """Write the comparison page of several runs (see `render_compare_html`), atomically.

    Args:
        runs: (label, Report) pairs; the first is the baseline.
        path: the HTML file; its directory is created when missing.

    Returns:
        The file's path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, render_compare_html(runs))


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
