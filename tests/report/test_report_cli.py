"""`ultracluster report` and `compare`, reading a run directory back, and the progress display (no Ray);
one run on the shared local Ray: progress lines, --quiet, and the metrics Ray exports while it runs."""
from __future__ import annotations

import io
import json
import re
import shutil
import time
import urllib.request
from dataclasses import replace

import pandas as pd
import pytest

from test_report_frames import make_infeasible, make_result, step
from ultracluster.cli import main
from ultracluster.errors import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK
from ultracluster.report import Progress, Report, RunDirError, build_report, format_compare, write_run_dir
from ultracluster.report.frames import TABLES


@pytest.fixture()
def run_dirs(tmp_path):
    a = write_run_dir(build_report(make_result()), tmp_path / "base")
    faster = replace(make_result(), steps=[step(0), step(1), step(1)])   # both measured steps: 1.0 s, not 1.0 and 1.5
    b = write_run_dir(build_report(faster), tmp_path / "faster")
    bad = write_run_dir(build_report(make_infeasible()), tmp_path / "nofit")
    return a, b, bad


def test_read_back_renders_the_same_files(run_dirs):
    a = run_dirs[0]
    built = build_report(make_result())
    back = Report.from_run_dir(a)
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(back, name), getattr(built, name), check_dtype=True, obj=name)
    assert back.summary == json.loads((a / "summary.json").read_text()) and back.shard_instances == [(0, 0), (1, 1)]
    original = {f: (a / f).read_bytes() for f in ("trace.json", "report.html")}
    for f in original:
        (a / f).unlink()
    assert main(["report", str(a), "--quiet"]) == EXIT_OK
    assert {f: (a / f).read_bytes() for f in original} == original     # byte for byte


def test_read_back_tolerates_older_run_dirs_and_names_bad_files(run_dirs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(run_dirs[0], old)
    for name in ("ranks", "stages", "shards"):
        (old / f"{name}.csv").unlink()
    rep = Report.from_run_dir(old)
    assert rep.ranks.empty and list(rep.stages.columns)[:3] == ["stage", "layers", "ranks"]
    with pytest.raises(RunDirError, match="no such directory"):
        Report.from_run_dir(tmp_path / "nowhere")
    (old / "summary.json").write_text("{not json")
    (old / "steps.csv").write_bytes(b"\xff\xfe\x00garbage\n\x00")
    with pytest.raises(RunDirError) as err:
        Report.from_run_dir(old)
    paths = [p.path for p in err.value.problems]
    assert paths == [str(old / "summary.json"), str(old / "steps.csv")]
    (old / "summary.json").unlink()
    with pytest.raises(RunDirError, match=r"summary.json: given '<missing>'; allowed: the summary.json"):
        Report.from_run_dir(old)


def test_cli_report(run_dirs, capsys):
    a, _, bad = run_dirs
    assert main(["report", str(a)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "step time    1.25 s  (2 measured of 3 replayed)" in out and "emulated by  2 actors on 1 Ray node" in out
    assert f"re-rendered: {a / 'report.html'}, {a / 'trace.json'}" in out
    assert main(["report", str(a), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out.split("\nre-rendered")[0])["step_time_s"] == 1.25
    assert main(["report", str(bad)]) == EXIT_INFEASIBLE
    assert "NO: stage 0 needs" in capsys.readouterr().out
    assert main(["report", str(a.parent / "missing")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "error: cannot read the run directory: 1 problem(s)" in err and "no such directory" in err
    assert "Traceback" not in err


def test_cli_compare(run_dirs, capsys, tmp_path):
    a, b, bad = run_dirs
    page = tmp_path / "out" / "cmp.html"
    assert main(["compare", str(a), str(b), str(bad), "--out", str(page)]) == EXIT_OK
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines[:-1])) <= 100                 # the third run went to a second block
    first = lines[:lines.index("")]
    assert first[0].split() == ["field", "base", "faster", "vs", "base"]
    row = {ln.split()[0]: ln.split()[1:] for ln in first[1:]}
    assert row["step_time_s"] == ["1.25", "s", "1", "s", "-250", "ms", "(-20.0", "%)"]
    assert row["tokens_per_s"][4:] == ["+1,638", "(+25.0", "%)"]
    assert row["feasible"] == ["True", "True", "="] and row["chips"] == ["32", "32", "0"]
    assert row["tp_comm_s"] == ["100", "ms", "100", "ms", "0"]
    second = lines[lines.index("") + 1:]
    assert second[0].split() == ["field", "base", "nofit", "vs", "base"]
    assert f"comparison page: {page}; every field in full: {page.parent / 'compare.csv'}" in out
    html = page.read_text()
    assert "https://" not in html and "<h1>ultracluster: 3 runs compared</h1>" in html
    assert '<td class="better">-250 ms (-20.0 %)</td>' in html and '<td class="better">+1,638 (+25.0 %)</td>' in html
    pairs_html = html[html.index("<h2>Every pair</h2>"):html.index("<h2>Summaries</h2>")]   # before the fields
    assert [m for m in re.findall(r"<tr><td>([^<]*)</td>", pairs_html)] == \
        ["faster vs base", "nofit vs base", "nofit vs faster"]                  # every pair, not only vs the first
    assert "not comparable: nofit is infeasible" in pairs_html
    full = pd.read_csv(page.parent / "compare.csv").set_index("field")
    assert list(full.columns) == ["base", "faster", "faster - base", "faster / base - 1", "nofit", "nofit - base",
                                  "nofit / base - 1"]
    assert float(full.loc["step_time_s", "faster - base"]) == pytest.approx(-0.25)
    assert float(full.loc["step_time_s", "faster / base - 1"]) == pytest.approx(-0.2)
    assert {"slowest_ranks", "model_flops_per_step", "warnings"} <= set(full.index)   # every field, not just the shown
    assert main(["compare", str(a)]) == EXIT_BAD_INPUT
    assert "two or more run directories" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "none")]) == EXIT_BAD_INPUT


def test_format_compare_labels_and_alignment():
    s1, s2 = build_report(make_result()).summary, build_report(make_infeasible()).summary
    text = format_compare([("a-long-name", s1), ("b", s2)])
    lines = text.splitlines()
    assert lines[0].split() == ["field", "a-long-name", "b", "vs", "a-long-name"]
    ends = {len(ln) for ln in lines if ln.split()[:1] in (["chips"], ["ranks"], ["instances"])}
    assert len(ends) == 1                                   # right-aligned columns
    assert re.search(r"^step_time_s\s+1.25 s\s+n/a\s+n/a$", text, re.M)
    assert re.search(r"^feasible\s+True\s+False\s+differs$", text, re.M)
    assert re.search(r"^instance_type\s+trn1.32xlarge\s+trn1.32xlarge\s+=$", text, re.M)
    assert re.search(r"^hbm_peak_gib\s+20.5 of 32 GiB\s+41.2 of 32 GiB\s+\+20.7 GiB \(\+101.0 %\)$", text, re.M)


def test_compare_of_many_runs_fits_100_columns_and_repeats_the_baseline():
    runs = [(f"run-with-a-rather-long-name-{i}", build_report(make_result()).summary) for i in range(5)]
    text = format_compare(runs)
    assert max(map(len, text.splitlines())) <= 100
    blocks = text.split("\n\n")
    assert blocks[-1].startswith("every pair, later vs earlier (10;")     # 5 runs: 10 pairs
    pair_lines = [ln.split(":")[0].strip() for ln in blocks.pop().splitlines()[1:] if ln.startswith("  run")]
    assert pair_lines == [f"run-with-a-rather-long-name-{j} vs run-with-a-rather-long-name-{i}"
                          for i in range(5) for j in range(i + 1, 5)]
    assert len(blocks) >= 2
    heads = [re.split(r"\s{2,}", block.splitlines()[0]) for block in blocks]
    for head in heads:                                      # each block starts with the baseline's column
        assert head[:2] == ["field", "run-with-a-…-long-name-0"]
    runs_shown = [h for head in heads for h in head[2:] if not h.startswith("vs ")]
    assert runs_shown == [f"run-with-a-…-long-name-{i}" for i in range(1, 5)]           # each once, in order
    assert sum(h.startswith("vs run-with") for head in heads for h in head) == 4


def test_compare_weighs_every_pair_with_days_dollars_goodput_and_flags():
    """Each later run against each earlier, not only against the first: c against b is its own verdict, with
    days, total dollars (FSx included) and goodput, whether the intervals overlap, and the runs' flags."""
    base = build_report(make_result()).summary

    def run(step, days, usd, goodput, lo, hi, **flags):
        return {**base, "step_time_s": step, "step_time_low_s": lo, "step_time_high_s": hi,
                "time_to_train_days": days, "total_cost_usd": usd, "storage_cost_usd": 0.1 * usd, "goodput": goodput,
                "mfu_implausible": False, "extrapolated": [], **flags}
    runs = [("a", run(1.25, 40.0, 2.0e6, 0.90, 1.1, 1.4)), ("b", run(1.0, 32.0, 1.6e6, 0.92, 0.9, 1.05)),
            ("c", run(0.98, 31.4, 1.7e6, 0.95, 0.85, 1.1, mfu_implausible=True, extrapolated=["tp"]))]
    text = format_compare(runs)
    assert max(map(len, text.splitlines())) <= 100
    rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip()}
    for key in ("time_to_train_days", "total_cost_usd", "storage_cost_usd", "goodput", "mfu_implausible",
                "extrapolated"):
        assert key in rows, key
    # the last block (a against c: three runs do not fit 100 columns side by side) shows c's flags
    assert rows["mfu_implausible"].split()[1:] == ["no", "yes", "(!)", "differs"]
    assert rows["extrapolated"].split()[1:] == ["-", "tp", "differs"]
    pair_text = text[text.index("every pair"):].replace("\n      ", " ")
    lines = {ln.split(":")[0].strip(): ln for ln in pair_text.splitlines()[1:]}
    assert list(lines) == ["b vs a", "c vs a", "c vs b"]
    cb = lines["c vs b"]          # c against b itself: -20 ms (-2.0 %), not against a
    assert "step -20 ms (-2.0 %)" in cb and "days -0.6 (-1.9 %)" in cb and "+$100,000 (+6.2 %)" in cb
    assert "goodput +3 points (+3.3 %)" in cb and "intervals overlap: not a finding" in cb
    assert "(c: MFU implausible, extrapolated on tp)" in cb
    assert "intervals apart: a finding" in lines["b vs a"] and "(c:" not in lines["b vs a"]
    infeasible = format_compare([("a", runs[0][1]), ("nofit", build_report(make_infeasible()).summary)])
    assert "nofit vs a: not comparable: nofit is infeasible" in infeasible


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_progress_plain_lines_when_not_a_tty():
    out = io.StringIO()
    p = Progress("smoke", stream=out, tty=False)
    p.starting(2, 4, 1)
    p.started(1)
    for rec in (step(0), step(1)):
        p.step_done(rec)
    p.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "smoke: starting 2 actors for 4 steps (1 warm-up)"
    assert re.fullmatch(r"smoke: 2 actors started on 1 Ray node in \d+\.\d s", lines[1])
    assert lines[2:] == ["smoke: step 1/4 (warm-up): 3 s emulated, 0.01 s wall",
                         "smoke: step 2/4: 1 s emulated, 0.01 s wall"]


def test_progress_bar_only_after_the_delay_and_erased(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")     # the bar is cut to the terminal's width
    out, clock = io.StringIO(), FakeClock()
    p = Progress("smoke", stream=out, tty=True, delay_s=2.0, tick_s=None, clock=clock)
    p.starting(16, 4, 1)
    clock.t += 1.0
    p.started(2)
    p.step_done(step(0))
    assert out.getvalue() == ""                              # a short run draws nothing
    clock.t += 1.5
    p.step_done(step(1))
    line = out.getvalue().split("\r\033[K")[-1]
    assert line == ("smoke | 16 actors on 2 nodes | steps [############............] 2/4 | last step 1 s emulated"
                    " | 2.5 s")
    p.finish()
    assert out.getvalue().endswith("\r\033[K") and "\n" not in out.getvalue()
    p.step_done(step(2))                                     # nothing after finish
    assert out.getvalue().endswith("\r\033[K")
    q = Progress("x", stream=io.StringIO(), tty=True, delay_s=0, tick_s=None, clock=FakeClock())
    q.starting(3, 2)
    assert q.line().startswith("x | starting 3 actors ") and q.line().endswith(" | 0.0 s")


def test_progress_bar_redraws_by_itself():
    out = io.StringIO()
    p = Progress("tick", stream=out, tty=True, delay_s=0.0, tick_s=0.01)
    p.starting(1, 1)
    deadline = time.monotonic() + 5
    while out.getvalue().count("\r\033[K") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.finish()
    assert out.getvalue().count("starting 1 actors") >= 3     # the spinner turns while actors start


def _metric(text: str, name: str, scenario: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'scenario="{scenario}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_cli_run_progress_quiet_and_exported_metrics(ray_session, scenarios_dir, tmp_path, capsys):
    """On the shared Ray: plain progress lines on a non-TTY stderr, nothing with --quiet, and the run's
    metrics on this node's Prometheus endpoint, as dashboards/ultracluster.json queries them."""
    name = "uc-metrics-test"
    args = ["run", str(scenarios_dir / "smoke.yaml"), "--set", f"name={name}", "--set", "training.steps=2"]
    assert main(args + ["--out", str(tmp_path / "a")]) == EXIT_OK
    err = capsys.readouterr().err
    assert err.splitlines()[0] == f"{name}: starting 2 actors for 3 steps (1 warm-up)"
    assert re.search(rf"^{name}: 2 actors started on 1 Ray node in \d+\.\d s$", err, re.M)
    assert re.search(rf"^{name}: step 3/3: [\d.e-]+ s emulated, [\d.]+ s wall$", err, re.M)
    assert main(args + ["--out", str(tmp_path / "b"), "--quiet"]) == EXIT_OK
    quiet = capsys.readouterr()
    assert quiet.out == "" and quiet.err == ""
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    node = ray_session._private.worker.global_worker.node
    url = f"http://{node.node_ip_address}:{node.metrics_export_port}/metrics"
    deadline, text = time.monotonic() + 40, ""
    while time.monotonic() < deadline:   # Ray's agent exports every few seconds
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        if (_metric(text, "ray_ultracluster_steps_done_total", name) or 0) >= 6:
            break
        time.sleep(1)
    assert _metric(text, "ray_ultracluster_steps_done_total", name) == 6          # 3 steps, 2 runs
    assert _metric(text, "ray_ultracluster_steps_planned", name) == 3
    last_step_s = pd.read_csv(tmp_path / "b" / "steps.csv")["step_time_s"].iloc[-1]
    assert _metric(text, "ray_ultracluster_step_time_seconds", name) == pytest.approx(last_step_s)
    assert _metric(text, "ray_ultracluster_actors_alive", name) == 0               # the run has ended
    parts = {m.group(1): float(m.group(2)) for m in re.finditer(
        rf'^ray_ultracluster_step_breakdown_seconds{{.*part="(\w+)".*scenario="{name}".*}} (\S+)$', text, re.M)}
    assert set(parts) == {"compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "data_stall", "checkpoint", "other"}
    assert sum(parts.values()) == pytest.approx(last_step_s, rel=1e-6)
    assert summary["scenario"] == name


def test_compare_writes_beside_the_runs_and_never_over_an_earlier_comparison(run_dirs, capsys, tmp_path,
                                                                              monkeypatch):
    a, b, bad = run_dirs
    monkeypatch.chdir(tmp_path.parent)        # nothing may land in the working directory
    before = set(tmp_path.parent.iterdir())
    assert main(["compare", str(a), str(b), "--quiet"]) == EXIT_OK
    assert set(tmp_path.parent.iterdir()) == before
    folder = a.parent / "compare"
    assert sorted(p.name for p in folder.iterdir()) == ["compare.csv", "compare.html"]
    first = (folder / "compare.csv").read_text()
    # a second comparison into the same place is refused, naming the directory and --force; nothing replaced
    assert main(["compare", str(a), str(bad), "--quiet"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "already holds a comparison" in err and "--force" in err and str(folder) in err
    assert (folder / "compare.csv").read_text() == first
    assert main(["compare", str(a), str(bad), "--quiet", "--force"]) == EXIT_OK
    assert "nofit" in (folder / "compare.csv").read_text()
    # --out DIR: the files go inside; a run directory is never written over
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "mine"), "--quiet"]) == EXIT_OK
    assert (tmp_path / "mine" / "compare.html").is_file() and (tmp_path / "mine" / "compare.csv").is_file()
    assert main(["compare", str(a), str(b), "--out", str(b), "--quiet"]) == EXIT_BAD_INPUT
    assert "is a run directory" in capsys.readouterr().err
