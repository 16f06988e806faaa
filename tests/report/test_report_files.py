"""Report → run directory: check-run-dir contract, atomic writes, StepWriter (no Ray)."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_report_frames import make_infeasible, make_result, step
from ultracluster.report import StepWriter, build_report, write_run_dir
from ultracluster.report.write import atomic_write_text

CHECKER = Path(__file__).resolve().parents[2].parent / "shared" / "tools" / "check-run-dir"
RUN_FILES = {"run.json", "summary.json", "steps.csv", "breakdown.csv", "memory.csv", "collectives.csv", "timeline.csv",
             "ranks.csv", "stages.csv", "shards.csv", "trace.json", "report.html", "scenario.json"}


def check_run_dir(run: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), str(run), "--need-trace", "--need-html"],
                          capture_output=True, text=True)


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_run_dir_passes_contract(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path / "runs" / "tiny-test")
    done = check_run_dir(run)
    assert done.returncode == 0, done.stdout
    assert done.stdout.strip() == "ok"
    assert {p.name for p in run.iterdir()} == RUN_FILES
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step_time_s"] == pytest.approx(1.25) and summary["compute_s"] == pytest.approx(0.65)
    assert [float(r["step_time_s"]) for r in rows(run / "steps.csv")] == [3.0, 1.0, 1.5]
    assert [r["warmup"] for r in rows(run / "breakdown.csv")] == ["True", "False", "False"]
    assert json.loads((run / "scenario.json").read_text())["training"]["global_batch"] == 8


def test_checker_catches_a_broken_breakdown(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    summary["compute_s"] += 0.5
    atomic_write_text(run / "summary.json", json.dumps(summary))
    assert check_run_dir(run).returncode == 1  # the checker (and so the test above) can fail


def test_infeasible_run_dir_passes_contract(tmp_path):
    run = write_run_dir(build_report(make_infeasible()), tmp_path / "bad")
    done = check_run_dir(run)
    assert done.returncode == 0, done.stdout
    text = (run / "summary.json").read_text()
    assert '"step_time_s": NaN' in text and '"hbm_peak_gib": 41.2' in text
    summary = json.loads(text)
    assert summary["feasible"] is False and math.isnan(summary["mfu"]) and "41.2 GiB" in summary["reason"]
    assert rows(run / "steps.csv") == [] and "Infeasible" in (run / "report.html").read_text()


def test_step_writer_keeps_finished_steps(tmp_path):
    out = tmp_path / "not" / "yet"
    writer = StepWriter(out)
    assert not out.exists()  # no side effect before the first step
    writer.append(step(0))
    writer.append(step(1))
    got = rows(out / "steps.csv")
    assert [(r["step"], r["warmup"], float(r["step_time_s"])) for r in got] == [("0", "True", 3.0), ("1", "False", 1.0)]
    assert os.listdir(out) == ["steps.csv"]  # no temp file left behind
    # the final report rewrites the same file with the same format
    report = build_report(make_result())
    report.steps = report.steps.iloc[:2]
    report.to_csv(tmp_path / "final")
    assert (tmp_path / "final" / "steps.csv").read_text() == (out / "steps.csv").read_text()


def test_step_writer_columns(tmp_path):
    writer = StepWriter(tmp_path, columns=["step", "step_time_s"])
    writer.append(step(2))
    assert (tmp_path / "steps.csv").read_text() == "step,step_time_s\n2,1.5\n"


def test_atomic_write_failure_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old")

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["summary.json"]
