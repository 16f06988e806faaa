"""The golden summaries (tests/golden/, written by scripts/golden.py) pin every shipped scenario's prediction.

A model change that moves any number by more than a relative 1e-9 fails here until the goldens are
regenerated (`python scripts/golden.py`, which prints what moved), so every move is seen in review.
"""
import json

import pytest

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"

GOLDEN = REPO / "tests" / "golden"


@pytest.fixture(scope="module")
def golden(load_script):
    return load_script("golden")


def test_every_shipped_scenario_has_a_golden_summary():
    have = {p.stem for p in GOLDEN.glob("*.json")}
    shipped = {p.stem for p in SCENARIOS.glob("*.yaml")}
    assert shipped == have, f"missing: {sorted(shipped - have)}; stale: {sorted(have - shipped)}"
    assert any(s.startswith("calib-") for s in shipped)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_prediction_equals_its_golden_summary(golden, path):
    pinned = json.loads((GOLDEN / f"{path.stem}.json").read_text())
    moved = golden.changes(pinned, golden.summary_of(path))
    assert not moved, (f"{path.stem} moved (run python scripts/golden.py and say why in the commit): "
                       + "; ".join(f"{k}: {a} -> {b}" for k, a, b in moved[:8]))


def test_the_comparison_sees_a_move_and_ignores_noise(golden):
    base = {"step_time_s": 10.0, "mfu": 0.3, "feasible": True, "reason": None, "step_time_low_s": float("nan")}
    assert golden.changes(base, dict(base)) == []
    assert golden.changes(base, dict(base, step_time_s=10.0 * (1 + 1e-12))) == []
    assert [k for k, *_ in golden.changes(base, dict(base, step_time_s=10.0 * (1 + 1e-6)))] == ["step_time_s"]
    assert [k for k, *_ in golden.changes(base, dict(base, feasible=False))] == ["feasible"]
    zero = {"dp_comm_hidden_s": 6.66e-15, "bubble_s": 0.0}          # zero up to rounding: another summation order
    assert golden.changes(zero, dict(zero, dp_comm_hidden_s=7.11e-15, bubble_s=3e-16)) == []
    assert [k for k, *_ in golden.changes(zero, dict(zero, bubble_s=2e-12))] == ["bubble_s"]
    assert [k for k, *_ in golden.changes(base, dict(base, step_time_low_s=9.0))] == ["step_time_low_s"]
