"""Report → run directory: the output contract (`ultracluster check`), atomic writes, StepWriter (no Ray)."""
from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from test_report_frames import make_infeasible, make_result, step
from ultracluster.cli import main
from ultracluster.report import StepWriter, build_report, write_run_dir
from ultracluster.report.check import RUN_FILES, check_run_dir
from ultracluster.report.write import atomic_write_text


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_run_dir_passes_contract(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path / "runs" / "tiny-test")
    assert check_run_dir(run) == []
    assert {p.name for p in run.iterdir()} == set(RUN_FILES)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step_time_s"] == pytest.approx(1.25) and summary["compute_s"] == pytest.approx(0.65)
    assert [float(r["step_time_s"]) for r in rows(run / "steps.csv")] == [3.0, 1.0, 1.5]
    assert [r["warmup"] for r in rows(run / "breakdown.csv")] == ["True", "False", "False"]
    assert json.loads((run / "scenario.json").read_text())["training"]["global_batch"] == 8


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    atomic_write_text(path, json.dumps(data))


def found(run: Path) -> str:
    return "\n".join(map(str, check_run_dir(run)))


def test_check_catches_a_broken_breakdown(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    edit_json(run / "summary.json", compute_s=summary["compute_s"] + 0.5)
    assert "summary.json: compute_s + tp_comm_s" in found(run)      # the parts no longer add up


def test_check_catches_summary_fields(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path)
    data = json.loads((run / "summary.json").read_text())
    del data["chips"]
    data.update(mfu=1.5, feasible="yes", tokens_per_s=data["tokens_per_s"] * 2)
    atomic_write_text(run / "summary.json", json.dumps(data))
    problems = check_run_dir(run)
    paths = {p.path for p in problems}
    assert {"summary.json: chips", "summary.json: feasible"} <= paths
    assert next(p for p in problems if p.path == "summary.json: chips").given == "<missing>"
    edit_json(run / "summary.json", chips=32, feasible=True)
    text = found(run)
    assert "summary.json: mfu: given 1.5; allowed: a fraction of peak in (0, 1]" in text
    assert "summary.json: tokens_per_s" in text


def test_check_catches_steps_that_disagree(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path)
    lines = (run / "steps.csv").read_text().splitlines()
    atomic_write_text(run / "steps.csv", "\n".join(lines[:-1]) + "\n")        # a step lost
    text = found(run)
    assert "steps.csv: rows: given 2; allowed: one per replayed step (steps_replayed = 3)" in text
    assert "summary.json: step_time_s" in text                                  # no longer the mean


def test_check_catches_crossing_trace_slices_network_pages_and_missing_files(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path)
    trace = json.loads((run / "trace.json").read_text())
    x = [e for e in trace["traceEvents"] if e["ph"] == "X"][0]
    nested = {**x, "ts": x["ts"] + x["dur"] / 4, "dur": x["dur"] / 2, "name": "inside"}
    trace["traceEvents"].append(nested)
    atomic_write_text(run / "trace.json", json.dumps(trace))
    assert check_run_dir(run) == []                                             # nesting is allowed
    crossing = {**x, "ts": x["ts"] + x["dur"] / 2, "dur": x["dur"], "name": "across"}
    trace["traceEvents"].append(crossing)
    atomic_write_text(run / "trace.json", json.dumps(trace))
    assert f"trace.json: track pid {x['pid']} tid {x['tid']}" in found(run)
    html = (run / "report.html").read_text()
    atomic_write_text(run / "report.html", html.replace("</head>", '<script src="https://cdn.example/x.js"></script>'
                                                                   "</head>"))
    assert "report.html: given" in found(run) and "offline page" in found(run)
    (run / "memory.csv").unlink()
    assert "files: given 'missing: memory.csv'" in found(run)


def test_infeasible_run_dir_passes_contract(tmp_path):
    run = write_run_dir(build_report(make_infeasible()), tmp_path / "bad")
    assert check_run_dir(run) == []
    text = (run / "summary.json").read_text()
    assert '"step_time_s": NaN' in text and '"hbm_peak_gib": 41.2' in text
    summary = json.loads(text)
    assert summary["feasible"] is False and math.isnan(summary["mfu"]) and "41.2 GiB" in summary["reason"]
    assert rows(run / "steps.csv") == [] and "Infeasible" in (run / "report.html").read_text()
    edit_json(run / "summary.json", reason="")
    assert [str(p) for p in check_run_dir(run)] == [
        "summary.json: reason: given ''; allowed: why the layout cannot run, in an infeasible run"]


def test_check_command_exit_codes(tmp_path, capsys):
    run = write_run_dir(build_report(make_result()), tmp_path / "run")
    assert main(["check", str(run)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {run} meets the output contract")
    edit_json(run / "summary.json", mfu=0.0)
    assert main(["check", str(run)]) == 1
    out = capsys.readouterr().out
    assert "1 problem(s)" in out and "summary.json: mfu: given 0.0" in out
    assert main(["check", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "RUN_DIR: given" in err and "nowhere (no such directory)" in err and "Traceback" not in err


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


def test_check_refuses_a_fifo_without_waiting_and_checks_the_interval(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path)
    (run / "steps.csv").unlink()
    os.mkfifo(run / "steps.csv")                     # nothing will ever write to it: reading would block
    try:
        problems = found(run)
        assert "steps.csv" in problems               # reported (as not a file), never read: no wait
    finally:
        (run / "steps.csv").unlink()
    run = write_run_dir(build_report(make_result()), tmp_path / "iv")
    step_s = json.loads((run / "summary.json").read_text())["step_time_s"]
    edit_json(run / "summary.json", step_time_low_s=step_s * 1.1, step_time_high_s=step_s * 1.2)
    assert "step_time_low_s, step_time_high_s" in found(run)       # the point is outside its interval
    edit_json(run / "summary.json", step_time_low_s=step_s * 0.9, step_time_high_s=step_s * 1.2)
    assert "step_time_low_s" not in found(run)


def test_cp_and_ep_comm_beside_tp_comm_and_the_check_holds_them_to_their_kinds(tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path)
    s = json.loads((run / "summary.json").read_text())
    keys = list(s)
    assert keys[keys.index("tp_comm_s") + 1:keys.index("tp_comm_s") + 3] == ["cp_comm_s", "ep_comm_s"]
    assert s["cp_comm_s"] == s["comm_cp_exposed_s"] and s["ep_comm_s"] == s["comm_ep_exposed_s"]
    assert s["comm_tp_exposed_s"] + s["cp_comm_s"] + s["ep_comm_s"] == pytest.approx(s["tp_comm_s"], rel=1e-12)
    assert check_run_dir(run) == []
    edit_json(run / "summary.json", cp_comm_s=s["cp_comm_s"] + 0.1)
    assert "summary.json: cp_comm_s: given" in found(run) and "comm_cp_exposed_s" in found(run)
    edit_json(run / "summary.json", cp_comm_s=s["cp_comm_s"], checkpoint_every_steps="200")
    assert "summary.json: checkpoint_every_steps: given '200'; allowed: an integer" in found(run)


def test_a_missing_price_is_said_in_the_summary_the_terminal_and_the_page(tmp_path):
    from ultracluster.report import format_summary

    result = replace(make_result(), price_per_hour_usd=None)    # an instance type the catalog has no price for
    run = write_run_dir(build_report(result), tmp_path)
    s = json.loads((run / "summary.json").read_text())
    assert s["price_per_hour_usd"] is None and s["usd_per_million_tokens"] is None
    said = [w for w in s["warnings"] if w.startswith("no price for ")]
    assert len(said) == 1 and "cluster.price_per_hour_usd" in said[0] and "--price-per-hour" in said[0]
    assert any(ln.startswith("warning") and ln.endswith(said[0]) for ln in format_summary(s).splitlines())
    html = (run / "report.html").read_text()
    assert "<b>no price</b>" in html and "cluster.price_per_hour_usd" in html


def test_a_configured_checkpoint_shows_its_block_write_and_restore_even_when_no_replayed_step_holds_one():
    from ultracluster.report import format_summary
    from ultracluster.runner import predict

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "faults-llama3-70b-trn2-sync.yaml"   # every 200
    s = predict(scenario)
    assert s["checkpoint_s"] == 0 and s["checkpoint_every_steps"] == 200 and s["checkpoint_block_s"] > 0
    (said,) = [w for w in s["warnings"] if w.startswith("checkpoint_s is 0")]
    assert f"each checkpoint blocks training {s['checkpoint_block_s']:.4g} s" in said
    assert f"{s['checkpoint_block_s'] / 200:.4g} s per step over its interval" in said
    lines = format_summary(s).splitlines()
    (row,) = [ln for ln in lines if ln.startswith("checkpoint ")]
    assert row.split(None, 1)[1].startswith("every 200 steps: blocks ") and "writes" in row and "restores in" in row
