"""Storage in whole runs: checkpoints and data loading in the breakdown, summary keys, `run --hours`."""
import json
from pathlib import Path

import pandas as pd
import pytest

from ultracluster import load_scenario, run
from ultracluster.shards.local import local_shards
from ultracluster.cli import main
from ultracluster.errors import EXIT_BAD_INPUT, EXIT_OK

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
BIG = ["storage.capacity_tib=48", "storage.throughput_mbps_per_tib=1000"]


def test_checkpoint_on_an_undersized_file_system_shows_as_checkpoint_s():
    """Sync checkpoints every 2 steps: on 2.4 TiB at 125 MB/s/TiB they cost most of the step, on 48 TiB at
    1000 MB/s/TiB almost nothing."""
    sets = ["training.steps=2", "training.warmup_steps=0"]
    f = SCENARIOS / "storage-checkpoint-small-fsx.yaml"
    small = run(load_scenario(f, sets), shards_factory=local_shards)
    big = run(load_scenario(f, sets + BIG), shards_factory=local_shards)
    ck_small, ck_big = small.steps["checkpoint_s"].tolist(), big.steps["checkpoint_s"].tolist()
    assert ck_small[0] == 0 and ck_big[0] == 0                     # checkpoint after every 2nd step only
    busy = small.steps["step_time_s"].iloc[0]
    assert ck_small[1] > 2 * busy                                  # the write dominates the step
    assert ck_big[1] < 0.05 * ck_small[1]
    # the step times differ by the checkpoint only; the summary names the write and the checkpoint size
    assert small.steps["step_time_s"].iloc[1] - ck_small[1] == pytest.approx(big.steps["step_time_s"].iloc[1]
                                                                            - ck_big[1], rel=1e-6)
    s = small.summary
    assert s["checkpoint_gb"] == pytest.approx(big.summary["checkpoint_gb"]) and s["checkpoint_gb"] > 50
    assert s["checkpoint_write_s"] == pytest.approx(ck_small[1] - s["checkpoint_block_s"] + s["checkpoint_write_s"],
                                                    rel=0.05)
    assert s["checkpoint_s"] == pytest.approx(ck_small[1] / 2)
    # async: only the device-to-host copy blocks
    asy = run(load_scenario(f, sets + ["checkpoint.mode=async"]), shards_factory=local_shards)
    assert 0 < asy.steps["checkpoint_s"].iloc[1] < 0.01 * ck_small[1]


def test_data_loading_stalls_when_storage_cannot_keep_up():
    f = SCENARIOS / "storage-data-stall-scratch.yaml"
    slow = run(load_scenario(f, ["training.steps=3"]), shards_factory=local_shards)
    fast = run(load_scenario(f, ["training.steps=3", "storage.capacity_tib=24"]), shards_factory=local_shards)
    none = run(load_scenario(f, ["training.steps=3", "storage.prefetch_steps=0"]), shards_factory=local_shards)
    stall = slow.summary["data_stall_s"]
    assert stall > 0.3 * slow.summary["step_time_s"]
    assert fast.summary["data_stall_s"] < 0.1 * stall
    assert none.summary["data_stall_s"] > stall                     # without prefetch every load is exposed
    assert slow.summary["data_gb_per_step"] == pytest.approx(32 * 2048 * 2048 * 2 / 1e9)  # first + last stage


def test_run_hours_writes_goodput_files(ray_session, tmp_path, capsys):
    sets = ["--set", "training.steps=1", "--set", "training.warmup_steps=0", "--set", "faults.instance_mtbf_hours=50"]
    out = tmp_path / "g"
    rc = main(["run", str(SCENARIOS / "storage-checkpoint-small-fsx.yaml"), "--out", str(out), "--hours", "240",
               *sets])
    assert rc == EXIT_OK
    text = capsys.readouterr().out
    assert "goodput" in text and "optimal interval" in text
    g = json.loads((out / "goodput.json").read_text())
    assert 0 < g["goodput"] < 1 and g["failures"] > 0 and g["hours"] == 240
    assert g["optimal_interval_s"] > 0 and g["checkpoint_every_steps"] == 2
    assert g["useful_s"] + sum(g["lost_s"].values()) == pytest.approx(240 * 3600, rel=1e-9)
    failures = pd.read_csv(out / "failures.csv")
    assert len(failures) == g["failures"] and {"time_h", "instance", "lost_work_s", "restore_s"} <= set(failures)
    lost = pd.read_csv(out / "time_lost.csv")
    assert lost["seconds"].sum() == pytest.approx(240 * 3600, rel=1e-9)
    assert not list(out.glob("*.tmp"))
    # bad --hours is bad input, named
    rc = main(["run", str(SCENARIOS / "smoke.yaml"), "--out", str(tmp_path / "bad"), "--hours", "-3", "--quiet"])
    assert rc == EXIT_BAD_INPUT and "--hours" in capsys.readouterr().err
