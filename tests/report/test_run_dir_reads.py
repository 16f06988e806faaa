"""`ultracluster report` and `Report.from_run_dir` validate what they read (no Ray): each CSV's header, every
row, finite numbers; only regular files, under a cap. A file that fails is refused with exit 2, naming it;
nothing is re-rendered from garbage."""
from __future__ import annotations

import contextlib
import io
import json
import os
import time

import pandas as pd
import pytest

from test_report_frames import make_infeasible, make_result
from ultracluster.cli import main
from ultracluster.errors import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK
from ultracluster.report import Report, RunDirError, build_report, write_run_dir
from ultracluster.report.frames import TABLES
from ultracluster.report.readback import CSV_MAX_BYTES, HEADER_MAX_BYTES


@pytest.fixture()
def run_dir(tmp_path):
    return write_run_dir(build_report(make_result()), tmp_path / "run")


def report_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["report", *args])
    return rc, out.getvalue(), err.getvalue()


def refused(run, name: str) -> str:
    """The one problem `from_run_dir` finds, which must name `name`; and `report` exits 2 without rendering."""
    with pytest.raises(RunDirError) as err:
        Report.from_run_dir(run)
    assert [p.path for p in err.value.problems] == [str(run / name)], err.value
    before = {f: (run / f).stat().st_mtime_ns for f in ("report.html", "trace.json")}
    rc, out, text = report_cli(str(run))
    assert rc == EXIT_BAD_INPUT and out == "" and str(run / name) in text and "Traceback" not in text
    assert {f: (run / f).stat().st_mtime_ns for f in before} == before          # nothing re-rendered
    return str(err.value.problems[0])


def test_a_timeline_of_one_character_is_refused_at_its_first_line_without_reading_it(run_dir):
    (run_dir / "timeline.csv").write_bytes(b"x" * (2 * HEADER_MAX_BYTES + 10))   # 300 MB in the issue
    start = time.monotonic()
    text = refused(run_dir, "timeline.csv")
    assert time.monotonic() - start < 5
    assert "a first line of more than 64 KiB" in text and "stage, stream, name, start_s" in text


@pytest.mark.parametrize("edit, expect", [
    (lambda t: t.replace("step_time_s", "step_time", 1), "missing ['step_time_s']; unexpected ['step_time']"),
    (lambda t: t.replace("\n", ",extra\n", 1), "unexpected ['extra']"),
    (lambda t: t + "1,False\n", "line 5, column step_time_s: ''"),       # a short row
    (lambda t: t.replace("\n0,True,", "\nzero,True,", 1), "line 2, column step: 'zero'"),
    (lambda t: t.replace("\n0,True,", "\n0,maybe,", 1), "line 2, column warmup: 'maybe'"),
    (lambda t: t.replace(",3.0,", ",inf,", 1), "allowed: a finite number"),
    (lambda t: t.replace(",3.0,", ",,", 1), "allowed: a finite number"),
    (lambda t: t.replace(",3.0,", ",nan,", 1), "'nan'"),
])
def test_a_malformed_steps_csv_is_refused_naming_line_and_column(run_dir, edit, expect):
    path = run_dir / "steps.csv"
    text = path.read_text()
    assert text.splitlines()[1].startswith("0,True,3.0,")          # the edits below hit the first row
    path.write_text(edit(text))
    assert expect in refused(run_dir, "steps.csv")


def test_extra_fields_in_a_row_are_refused(run_dir):
    path = run_dir / "memory.csv"
    lines = path.read_text().splitlines()
    lines[1] += ",7"
    path.write_text("\n".join(lines) + "\n")
    assert "unreadable CSV" in refused(run_dir, "memory.csv")


def test_fifos_and_files_over_the_cap_are_refused_without_blocking(run_dir):
    fifo = run_dir / "timeline.csv"
    fifo.unlink()
    os.mkfifo(fifo)
    try:
        start = time.monotonic()
        assert "given 'it is a FIFO'" in refused(run_dir, "timeline.csv")
        assert time.monotonic() - start < 5
    finally:
        fifo.unlink()
    summary = run_dir / "summary.json"
    saved = summary.read_bytes()
    summary.unlink()
    os.mkfifo(summary)
    try:
        assert "given 'it is a FIFO'" in refused(run_dir, "summary.json")
    finally:
        summary.unlink()
        summary.write_bytes(saved)
    with open(run_dir / "ranks.csv", "r+b") as f:       # sparse: over the cap without writing it
        f.truncate(CSV_MAX_BYTES + 1)
    try:
        assert "allowed: a regular CSV file of at most 1.0 GiB" in refused(run_dir, "ranks.csv")
    finally:
        (run_dir / "ranks.csv").unlink()


def test_what_a_run_writes_reads_back_exactly_including_an_infeasible_runs_empty_cells(tmp_path):
    bad = write_run_dir(build_report(make_infeasible()), tmp_path / "nofit")
    stages = pd.read_csv(bad / "stages.csv")
    assert stages["compute_mean_s"].isna().all()          # a statistic an infeasible run cannot measure
    rep = Report.from_run_dir(bad)
    built = build_report(make_infeasible())
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(rep, name), getattr(built, name), obj=name)
    assert report_cli(str(bad), "--quiet")[0] == EXIT_INFEASIBLE
    ok = write_run_dir(build_report(make_result()), tmp_path / "ok")
    (ok / "stages.csv").write_text((bad / "stages.csv").read_text().replace("0,", "0,", 1))
    with pytest.raises(RunDirError, match="compute_min_s"):   # empty cells in a feasible run are garbage
        Report.from_run_dir(ok)


def test_an_interrupted_run_directory_says_so(run_dir):
    (run_dir / "summary.json").unlink()
    (run_dir / "run.json").write_text(json.dumps({"finished": False, "interrupted": True, "signal": "SIGTERM",
                                                  "error": None, "steps_finished": 2}))
    text = refused(run_dir, "summary.json")
    assert "this run interrupted by SIGTERM after 2 step(s)" in text


def test_a_good_directory_still_renders(run_dir):
    rc, out, _ = report_cli(str(run_dir))
    assert rc == EXIT_OK and "re-rendered" in out
