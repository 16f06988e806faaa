"""Every count a scenario gives is bounded by what the emulator answers in reasonable time and memory: the catalog's
largest cluster first (the bound `plan` applies), then sizes, replayed steps and passes, and the failures of
`run --hours`; each beyond its bound is exit 2 naming the key and the bound, never a MemoryError or a run that
never ends."""
from __future__ import annotations

from pathlib import Path

import pytest

from ultracluster.cli import main
from ultracluster.cluster.catalog import INSTANCES, largest_cluster
from ultracluster.errors import EXIT_BAD_INPUT, ScenarioError
from ultracluster.scenario import load_scenario
from ultracluster.scenario.checks import MAX_PASSES, MAX_REPLAYED_STEPS

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scenarios" / "smoke.yaml"
FAULTS = REPO / "scenarios" / "faults-llama3-70b-trn2-sync.yaml"


def problems(*sets: str) -> list:
    with pytest.raises(ScenarioError) as err:
        load_scenario(SMOKE, list(sets))
    return err.value.problems


@pytest.mark.parametrize("instances", [100_000, 100_000_000])
def test_the_catalogs_largest_cluster_is_checked_first(instances):
    limit = largest_cluster(INSTANCES[load_scenario(SMOKE).cluster.instance])
    found = problems(f"cluster.instances={instances}", "training.global_batch=50000")
    assert [p.path for p in found] == ["cluster.instances"]           # not global_batch, derived from it
    assert f"up to {limit:,} for trn1.32xlarge" in found[0].allowed and "30,000 chips" in found[0].allowed
    load_scenario(SMOKE, [f"cluster.instances={limit}", f"training.global_batch={limit * 16}"])   # the bound loads


def test_many_steps_name_the_bound_and_hours():
    found = problems("training.steps=100000000")
    assert found[0].path == "training.steps" and f"{MAX_REPLAYED_STEPS:,}" in found[0].allowed
    assert "--hours" in found[0].allowed
    found = problems(f"training.steps={MAX_REPLAYED_STEPS}", "training.warmup_steps=1")
    assert "steps + warmup_steps" in found[0].allowed


@pytest.mark.parametrize("key,value", [("training.global_batch", 1 << 40), ("model.layers", 10 ** 6),
                                       ("model.hidden", 1 << 40), ("training.seq_len", 1 << 40),
                                       ("model.vocab", 1 << 40), ("seed", 1 << 80)])
def test_sizes_beyond_their_bound_are_refused_by_validate_and_run_without_a_memory_error(key, value, capsys):
    for command in (["validate"], ["run", "--quiet"]):
        assert main([*command, str(SMOKE), "--set", f"{key}={value}"]) == EXIT_BAD_INPUT
        err = capsys.readouterr().err
        assert f"{key}: given {value}; allowed: at most" in err and "Traceback" not in err


def test_the_replayed_passes_are_bounded_with_their_arithmetic():
    # smoke: dp 4, pp 2; 4 steps of 2^20 / 4 = 262,144 microbatches per replica: 2,097,152 passes
    load_scenario(SMOKE, ["training.global_batch=1048576"])
    assert 4 * 262_144 * 2 <= MAX_PASSES
    found = problems("training.global_batch=1048576", "training.steps=4")
    assert found[0].path == "training.global_batch"
    assert f"5 x 262,144 x 2 x 1 = {5 * 262_144 * 2:,}" in found[0].allowed


def test_hours_with_a_tiny_mtbf_is_refused_before_anything_runs(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(FAULTS), "--set", "faults.instance_mtbf_hours=1e-9", "--hours", "720", "--out", str(out),
                 "--quiet"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "faults.instance_mtbf_hours: given 1e-09" in err and "--hours 720 on 64 instances" in err
    assert "at least 0.4608 hours" in err and not out.exists()
    assert main(["run", str(FAULTS), "--hours", "1e9", "--out", str(out), "--quiet"]) == EXIT_BAD_INPUT
    assert "--hours: given 1000000000.0; allowed: at most 87,600 hours" in capsys.readouterr().err
