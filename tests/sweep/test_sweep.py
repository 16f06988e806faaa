"""`ultracluster sweep`: every variant validated before anything runs, rows equal to separate `run`s, the same
table in this process and as Ray tasks, interruption and rerun, the terminal table, the assumptions named."""
from __future__ import annotations

import hashlib
import json
import math

import pandas as pd
import pytest

from ultracluster.cli import main
from ultracluster.errors import OutDirError
from ultracluster.sweep import build, format_sweep, run_sweep

FAULTS = "scenarios/faults-llama3-70b-trn2-sync.yaml"
SMOKE = "scenarios/smoke.yaml"
MACHINE = ["wall_s"]            # the one column that says how fast it ran, not what it found


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=MACHINE).reset_index(drop=True),
                                  b.drop(columns=MACHINE).reset_index(drop=True), check_exact=True)


def test_every_bad_value_is_named_at_once_and_nothing_runs(tmp_path, capsys):
    out = tmp_path / "sw"
    rc = main(["sweep", FAULTS, "--vary", "storage.throughput_mbps_per_tib=125,300,7", "--vary",
               "checkpoint.mode=sync,sometimes", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert "Traceback" not in err
    for given in ("300", "7", "sometimes"):
        assert f"given {given}" in err or f"given '{given}'" in err, err
    assert "storage.throughput_mbps_per_tib" in err and "checkpoint.mode" in err
    assert "(in 2 of 6 variants" in err          # each problem once, with how many variants share it


@pytest.mark.parametrize("argv, flag", [
    (["--vary", "storage.capacity_tib"], "--vary"),
    (["--vary", "storage.capacity_tib=1,2", "--vary", "checkpoint.mode=sync", "--zip"], "--zip"),
    (["--vary", "storage.capacity_tib=1,2,3", "--vary", "checkpoint.every_steps=1,2", "--max-variants", "5"],
     "--max-variants"),
    (["--vary", "storage.capacity_tib=1,1"], "--vary storage.capacity_tib"),
    (["--vary", "name=a,b"], "--vary name"),
    (["--vary", "storage.capacity_tib=1,2", "--assumptions", "maybe"], "--assumptions"),
    (["--vary", "storage.capacity_tib=1,2", "--hours", "-1"], "--hours"),
    (["--vary", "storage.nonsense=1,2"], "storage.nonsense"),
])
def test_bad_flags_name_the_flag_and_exit_2(tmp_path, capsys, argv, flag):
    rc = main(["sweep", FAULTS, *argv, "--out", str(tmp_path / "sw"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and flag in err and "Traceback" not in err and not (tmp_path / "sw").exists(), err


def test_the_sweep_section_of_a_scenario_and_dp_derived(tmp_path):
    import yaml

    doc = yaml.safe_load(open(SMOKE))
    doc["parallelism"]["dp"] = 4
    doc["sweep"] = {"vary": {"cluster.instances": [2, 4], "training.micro_batch": [1, 2]}, "zip": True}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    plan = build(path, [], [], None, None)
    assert [v.values for v in plan.variants] == [{"cluster.instances": 2, "training.micro_batch": 1},
                                                 {"cluster.instances": 4, "training.micro_batch": 2}]
    assert [v.scenario.parallelism.dp for v in plan.variants] == [4, 8]    # the file's dp 4 derived per variant
    assert any("parallelism.dp" in n for n in plan.notes)
    assert plan.variants[0].scenario.sweep is None


def test_rows_equal_separate_runs(ray_session, tmp_path):
    """Each row of a small FSx sweep with --hours is the summary.json and goodput.json of its own `run`."""
    sets = ["training.budget_tokens=1e12", "cluster.price_per_hour_usd=30", "storage.throughput_mbps_per_tib=125"]
    vary = ["--vary", "storage.capacity_tib=4.8,48", "--vary", "checkpoint.mode=sync"]
    rc = main(["sweep", FAULTS, *vary, "--hours", "48", "--out", str(tmp_path / "sw"), "--quiet",
               *[x for s in sets for x in ("--set", s)]])
    assert rc == 0
    table = pd.read_csv(tmp_path / "sw" / "sweep.csv")
    assert list(table["storage.capacity_tib"]) == [4.8, 48]
    for i, cap in enumerate((4.8, 48)):
        run_dir = tmp_path / f"run-{cap}"
        assert main(["run", FAULTS, "--hours", "48", "--out", str(run_dir), "--quiet",
                     *[x for s in sets + [f"storage.capacity_tib={cap}", "checkpoint.mode=sync"]
                       for x in ("--set", s)]]) == 0
        s = json.loads((run_dir / "summary.json").read_text())
        g = json.loads((run_dir / "goodput.json").read_text())
        row = table.iloc[i]
        for k in ("step_time_s", "step_time_low_s", "step_time_high_s", "tokens_per_s", "mfu", "hbm_peak_gib",
                  "data_stall_s", "checkpoint_s", "price_per_hour_usd"):
            assert row[k] == pytest.approx(s[k], rel=1e-12, abs=0), k
        for k in ("goodput", "time_to_train_days", "total_cost_usd"):
            assert row[k] == pytest.approx(g[k], rel=1e-12, abs=0), k
        assert row["failures"] == g["failures"]
        assert row["price_source"] == s["price_source"] == "cluster.price_per_hour_usd"
    assert table["goodput"].iloc[0] < table["goodput"].iloc[1]        # the small file system loses more


def test_in_process_and_ray_tasks_give_the_same_table_and_reruns_skip(ray_session, tmp_path):
    plan = build(SMOKE, [], ["cluster.network.efa_gbps=100,400", "training.micro_batch=1,2"], None, None)
    here = tmp_path / "here"
    # interrupted after two rows: they are kept
    class Stop:
        def phase(self, *a, **k): pass

        def advance(self, n):
            if n == 2:
                raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:             # this process: no Ray attached for the pricing
        mp.setattr("ultracluster.actors.plan_tasks.wanted", lambda address: False)
        with pytest.raises(KeyboardInterrupt):
            run_sweep(plan, here, progress=Stop())
        assert json.loads((here / "sweep.json").read_text())["finished"] is False
        assert len(pd.read_csv(here / "sweep.csv")) == 2
        done = run_sweep(plan, here)
    assert done.summary["reused"] == 2 and done.summary["finished"]
    on_ray = run_sweep(plan, tmp_path / "ray")            # the tests' Ray (2 CPUs) is attached: Ray tasks
    assert on_ray.summary["evaluated_by"] == "Ray tasks" and on_ray.summary["ray_nodes"] == 1
    _same(done.table, on_ray.table)
    assert len(done.table) == 4 and done.table["status"].eq("ok").all()
    # the same sweep again: nothing priced; another sweep into the directory needs force
    again = run_sweep(plan, here)
    assert again.summary["reused"] == 4 and again.summary["evaluated_by"] == "nothing left to price"
    other = build(SMOKE, [], ["cluster.network.efa_gbps=100,400"], None, 12.0)
    with pytest.raises(OutDirError, match="--force"):
        run_sweep(other, here)
    assert run_sweep(other, here, force=True).summary["variants"] == 2


def test_terminal_table_fits_100_columns_and_names_the_assumptions(tmp_path):
    plan = build(FAULTS, ["training.budget_tokens=1e12"],
                 ["storage.throughput_mbps_per_tib=125,250", "storage.capacity_tib=4.8,48"], None, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("ultracluster.actors.plan_tasks.wanted", lambda address: False)
        res = run_sweep(plan, tmp_path / "on")
        off = run_sweep(build(FAULTS, ["training.budget_tokens=1e12"],
                              ["storage.throughput_mbps_per_tib=125,250", "storage.capacity_tib=4.8,48"], None, None,
                              conservative=True), tmp_path / "off", assumptions_on=False)
    text = format_sweep(res.table, res.summary, plan.keys)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "burst" in text and "no price: set cluster.price_per_hour_usd or --price-per-hour" in text
    assert res.table["warnings"].str.contains("storage.burst_bucket_s").all()
    assert off.table["warnings"].str.contains("--assumptions off").all()
    assert (off.table["assumptions"] == "off").all()
    # without the burst allowance the data stall or checkpoint can only be slower
    assert (off.table["goodput"] <= res.table["goodput"] + 1e-12).all()
    assert math.isnan(res.table["total_cost_usd"].iloc[0])
    html = (tmp_path / "on" / "sweep.html").read_text()
    assert 'class="heatmap"' in html and html.count('class="chart"') >= 4 and 'class="interval"' in html


def test_a_kept_row_takes_the_new_grids_variant_number(tmp_path, monkeypatch):
    """`--vary seed=0,1,2` then `--vary seed=2,3` into the same directory: seed 2's row is reused, as variant 1 of
    the new grid (it was variant 3), and the table is in the new grid's order."""
    monkeypatch.setattr("ultracluster.actors.plan_tasks.wanted", lambda address: False)
    out = tmp_path / "sw"
    run_sweep(build(SMOKE, [], ["seed=0,1,2"], None, None), out)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.is_file()}
    with pytest.raises(OutDirError, match=r"holds 2 row\(s\) of an earlier sweep .* add --force"):
        run_sweep(build(SMOKE, [], ["seed=2,3"], None, None), out)      # seeds 0 and 1 would be dropped
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.is_file()} == before
    again = run_sweep(build(SMOKE, [], ["seed=2,3"], None, None), out, force=True)
    assert again.summary["reused"] == 1
    assert again.table["variant"].tolist() == [1, 2] and again.table["seed"].tolist() == [2, 3]
    table = pd.read_csv(out / "sweep.csv")
    assert table["variant"].tolist() == [1, 2] and table["seed"].tolist() == [2, 3]
