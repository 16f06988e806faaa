"""Prediction intervals (ultracluster.uncertainty): built from the fit's cross-validated residuals, the release
spread and the factors no measurement pins, propagated through the model; and `ultracluster sensitivity`."""
import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ultracluster import load_scenario
from ultracluster.calibration.fitted_files import DEFAULT, FITTED
from ultracluster.runner import predict
from ultracluster import uncertainty
from ultracluster.layouts.setting_times import one_step, replayed_step_time, setting_step_times as step_times
from ultracluster.uncertainty import Z80, evidence, extrapolated, extrapolation_log


def interval(scenario, point_s, *args, **kw):
    """`uncertainty.interval` with its settings timed by the model side, as `run` times them."""
    return uncertainty.interval(scenario, point_s, *args, times=step_times, **kw)

REPO = FITTED.parents[2]
SCENARIOS = REPO / "scenarios"


def job(instance: str, tp: int = 8, pp: int = 1, instances: int = 2, seq: int = 4096, precision: str = "bf16"):
    return load_scenario({
        "name": "iv", "model": {"preset": "llama2-7b", "layers": 4 * pp},
        "training": {"seq_len": seq, "global_batch": 64, "precision": precision, "steps": 1, "warmup_steps": 0},
        "parallelism": {"tp": tp, "pp": pp}, "cluster": {"instance": instance, "instances": instances},
    })


def test_off_the_calibrated_domain_the_axes_are_named_and_the_interval_widens():
    doc = json.loads(FITTED.read_text())
    worst = doc["cross_validation"]["worst_abs_error_pct"]
    assert extrapolation_log([]) == 0.0
    assert extrapolation_log(["tp", "pp"]) == pytest.approx(math.sqrt(2) * math.log1p(worst / 100))
    inside = load_scenario(REPO / "scenarios" / "calib-gpt3-23b-tp8pp4.yaml")
    assert extrapolated(inside, "trainium") == []
    wide = inside.model_copy(update={"parallelism": inside.parallelism.model_copy(update={"tp": 2, "cp": 2})})
    assert extrapolated(wide, "trainium") == ["tp", "cp"]
    assert extrapolated(inside, "trainium3") == ["generation"]
    s_in = predict(inside, intervals=True)
    assert s_in["extrapolated"] == [] and s_in["mfu_implausible"] is False
    s_out = predict(load_scenario(REPO / "scenarios" / "calib-gpt3-23b-tp8pp4.yaml", ["training.seq_len=1024"]),
                    intervals=True)
    assert s_out["extrapolated"] == ["seq_len"]
    iv_in, iv_out = interval(inside, 10.0), interval(wide, 10.0)
    assert iv_out.high_s / iv_out.low_s > iv_in.high_s / iv_in.low_s


def test_a_plans_extrapolated_column_is_each_layouts_axes():
    """`extrapolated_columns` (a plan's rows, each distinct set of axes joined once) says of every layout what
    `extrapolated_rows` says of it, on and off the domain, for a chip with measured rows and one without."""
    import numpy as np

    from ultracluster.uncertainty import extrapolated_columns, extrapolated_rows

    tp, pp, cp = (a.ravel() for a in np.meshgrid([1, 2, 8, 32, 64], [1, 4, 64], [1, 2, 16]))
    n = tp.size
    value = {"tp": tp, "pp": pp, "cp": cp, "seq_len": 4096, "params_b": 70.0,
             "zero": np.resize([0, 1, 3], n), "recompute": np.resize(["none", "selective", "full"], n).astype(object)}
    for gen in ("trainium", "trainium3"):
        rows = extrapolated_rows(value, gen)
        text, count = extrapolated_columns(value, gen)
        assert list(text) == [",".join(a) for a in rows] and list(count) == [len(a) for a in rows]
        assert 1 < len(set(text)) < n and (gen == "trainium3") == all(t.startswith("generation") for t in text)
    assert list(extrapolated_columns(value, "trainium", {})[0]) == [""] * n      # no domain: nothing is off it


def test_evidence_is_the_committed_cross_validation():
    """The fit's half-width is what docs/uncertainty.md says: the 80th percentile of the leave-one-layout-out
    |log errors| in calibration.json (linear between the order statistics around rank 0.8 (n - 1))."""
    doc = json.loads(FITTED.read_text())
    cv = sorted(abs(math.log1p(v["cv_error_pct"] / 100)) for v in doc["layouts"].values() if "cv_error_pct" in v)
    assert len(cv) >= 5
    rank = 0.8 * (len(cv) - 1)
    below = int(rank)
    p80 = cv[below] + (rank - below) * (cv[min(below + 1, len(cv) - 1)] - cv[below])
    ev = evidence()
    assert ev.fit_log == pytest.approx(p80, rel=1e-12)
    assert ev.release_sigma == pytest.approx(doc["release_spread"])
    assert ev.half_width_log == pytest.approx(math.hypot(ev.fit_log, Z80 * ev.release_sigma))


def test_trn1_interval_is_fit_release_and_its_one_open_link_factor():
    sc = job("trn1.32xlarge")
    s = predict(sc, intervals=True)
    iv = interval(sc, s["step_time_s"])
    assert [sw.factor.name for sw in iv.swings] == ["neuronlink_efficiency_trn1"]
    # off the calibrated domain each extrapolated axis adds the worst leave-one-out error in quadrature, and the
    # tokens-per-core and MFU axes their measured growth times the distance beyond the rows (domain.growth_log)
    from ultracluster.domain import growth_log, scenario_values
    grow = growth_log(scenario_values(sc, s["mfu"]), "trainium")
    h = math.sqrt(evidence().half_width_log ** 2 + extrapolation_log(iv.extrapolated) ** 2 + grow ** 2)
    assert iv.high_s == pytest.approx(s["step_time_s"] * math.exp(math.hypot(h, iv.slow_log)))
    assert iv.low_s == pytest.approx(s["step_time_s"] * math.exp(-math.hypot(h, iv.fast_log)))
    assert s["step_time_low_s"] == pytest.approx(iv.low_s) and s["step_time_high_s"] == pytest.approx(iv.high_s)
    assert s["tokens_per_s_low"] == pytest.approx(s["tokens_per_step"] / iv.high_s)


def test_the_hardware_part_is_the_weighted_percentiles_of_every_draw_timed_exactly():
    # the per-factor grids and the exact pricing beside each end give what pricing every draw would
    import numpy as np
    from ultracluster.cluster import build_cluster
    from ultracluster.calibration.fitted_files import fitted
    from ultracluster.uncertainty import DRAWS, _weights, factors_for, halton, hardware, weighted_quantile

    sc = job("trn2.48xlarge", tp=32, instances=2)
    cal = fitted()
    factors = tuple(factors_for(build_cluster(sc, 1, cal), pinned=False))
    w, row = _weights(factors, cal, step_times)
    hw = hardware(lambda cals, which: step_times(sc, [cals[j] for j in which[0]])[None, :], cal, factors, 1,
                  lambda: (w, row))
    base = float(hw.base[0])
    q10, q90 = -float(hw.fast_log[0]), float(hw.slow_log[0])      # both ends clear of the point here (below)
    take = np.arange(0, DRAWS, 16)                                       # 256 draws, each priced exactly
    u = halton(DRAWS, len(factors))[take]
    exact = np.log(step_times(sc, [cal.with_(**{f.name: float(f.low + v[k] * (f.high - f.low))
                                                for k, f in enumerate(factors)}) for v in u]) / base)
    ww = w[take] / w[take].sum()
    assert row                                                   # the Trn2 run weighs these settings
    assert q10 == pytest.approx(weighted_quantile(exact, ww, 0.1), abs=0.04)
    assert q90 == pytest.approx(weighted_quantile(exact, ww, 0.9), abs=0.04)
    assert q10 < 0 < q90


def test_the_published_trn2_run_is_fitted_and_weights_the_band_it_narrows(monkeypatch):
    """`t1` is no evidence for the Trn2 bands: it fits `in_graph_sync_scale_trn2`, so the model meets it by
    construction, and every Trn2 band weighs its settings by how well they reproduce it, so the band at its own
    layout holds it by construction too (neither is checked here: neither could fail). What can fail: the fit,
    the band built as docs/uncertainty.md states it, and the weighting narrowing the band."""
    import ultracluster.uncertainty as unc
    from ultracluster.uncertainty import anchor, _weights

    row, t1, published = anchor()
    point = predict(t1)["step_time_s"]
    assert point == pytest.approx(published, rel=1e-3)          # the fit (calibration.json "trn2")
    anchored = interval(t1, point)
    assert anchored.anchored == row and anchored.extrapolated == []
    h = evidence().half_width_log                                 # on the calibrated domain: fit and releases only
    assert anchored.high_s == pytest.approx(point * math.exp(math.hypot(h, anchored.slow_log)), rel=1e-12)
    assert anchored.low_s == pytest.approx(point * math.exp(-math.hypot(h, anchored.fast_log)), rel=1e-12)
    assert anchored.slow_log > 0 and anchored.fast_log > 0       # the Trn2 factors still move t1's step
    _weights.cache_clear()
    monkeypatch.setattr(unc, "anchor", lambda: None)             # every setting weighted alike
    loose = interval(t1, point)
    _weights.cache_clear()
    assert loose.anchored == ""
    assert anchored.high_s / anchored.low_s < loose.high_s / loose.low_s


@settings(max_examples=12, deadline=None)
@given(tp=st.sampled_from([1, 2, 8, 32]), pp=st.sampled_from([1, 2]), seq=st.sampled_from([1024, 4096]),
       precision=st.sampled_from(["bf16", "fp8"]))
def test_intervals_hold_the_point_are_positive_and_wider_on_less_measured_hardware(tp, pp, seq, precision):
    widths = {}
    for inst, n in (("trn1.32xlarge", 2), ("trn2.48xlarge", 1)):
        s = predict(job(inst, tp, pp, n, seq, precision), intervals=True)
        if not s["feasible"]:
            return
        assert 0 < s["step_time_low_s"] <= s["step_time_s"] <= s["step_time_high_s"]
        assert 0 < s["tokens_per_s_low"] <= s["tokens_per_s"] <= s["tokens_per_s_high"]
        widths[inst] = math.log(s["step_time_high_s"] / s["step_time_low_s"])
    assert widths["trn2.48xlarge"] > widths["trn1.32xlarge"]


def test_an_infeasible_run_has_no_interval():
    sc = load_scenario({"name": "big", "model": {"preset": "llama3.1-70b"}, "training": {"seq_len": 8192,
                        "global_batch": 32}, "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge",
                                                                                   "instances": 1}})
    s = predict(sc, intervals=True)
    assert not s["feasible"] and math.isnan(s["step_time_low_s"]) and math.isnan(s["tokens_per_s_high"])


def test_sensitivity_command_writes_its_table_csv_and_page(tmp_path, scenarios_dir):
    out = tmp_path / "sens"
    done = subprocess.run([sys.executable, "-m", "ultracluster", "sensitivity", str(scenarios_dir / "smoke.yaml"),
                           "--set", "cluster.instance=trn2.48xlarge", "--set", "cluster.instances=1",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "80 % interval" in done.stdout and "neuronlink_efficiency_trn2" in done.stdout
    rows = list(csv.DictReader((out / "sensitivity.csv").open()))
    swings = [float(r["swing_s"]) for r in rows]
    assert swings == sorted(swings, reverse=True) and len(rows) >= 10
    assert all(float(r["step_time_at_low_s"]) > 0 and float(r["step_time_at_high_s"]) > 0 for r in rows)
    page = (out / "sensitivity.html").read_text()
    assert "<svg" in page and "Tornado" in page and "http://" not in page and "https://" not in page
    bad = subprocess.run([sys.executable, "-m", "ultracluster", "sensitivity", str(scenarios_dir / "smoke.yaml"),
                          "--set", "parallelism.tp=3"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "parallelism.tp" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("instance,tp,pp,instances", [("trn2.48xlarge", 8, 2, 1), ("trn1.32xlarge", 32, 1, 2),
                                                      ("trn2.48xlarge", 4, 4, 2)])
def test_the_vectorized_timing_is_the_replay_when_nothing_is_random(instance, tp, pp, instances):
    sc = load_scenario({**job(instance, tp, pp, instances).to_dict(), "faults": {"jitter": 0.0}})
    cals = [DEFAULT, DEFAULT.with_(tensor_efficiency=0.5), DEFAULT.with_(layer_overhead_s=0.004),
            DEFAULT.with_(neuronlink_efficiency_trn1=0.4, neuronlink_efficiency_trn2=0.3),
            DEFAULT.with_(efa_efficiency=0.2, launch_s_trn2=40e-6)]
    fast = step_times(sc, cals)                          # one evaluation over the five settings
    replayed = [replayed_step_time(one_step(sc), c) for c in cals]
    assert fast == pytest.approx(replayed, rel=1e-9)
    assert len(set(fast.round(12))) == len(cals)         # every setting moved the step


def test_degraded_instances_are_timed_on_the_fast_path_as_the_replay_times_them():
    """A degraded run's interval times every setting in one fast-path evaluation (issue 43: it replayed each), its
    comm the slowest replica's (`replay.degraded.slowest_replica_comm`): equal to the replay of each setting, on
    Trn1 and on a Trn2 pipeline (jitter off: with it the fast path takes each stage's slowest replica's speed)."""
    from ultracluster.layouts import setting_times

    sc = load_scenario({"name": "degraded", "model": {"preset": "llama2-7b", "layers": 4},
                        "training": {"seq_len": 2048, "global_batch": 32, "steps": 1, "warmup_steps": 0},
                        "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2},
                        "faults": {"degraded": [{"instances": [1], "efa_nics": 2}]}})
    trn2 = load_scenario(SCENARIOS / "llama2-70b-tp32pp4-trn2-64.yaml",
                         ["faults.jitter=0", "faults.degraded=[{instances: [5], efa_nics: 1, neuronlink_scale: 0.5}]"])
    assert setting_times.degraded_parts_of(one_step(sc)) and setting_times.degraded_parts_of(one_step(trn2))
    for scenario, cals in ((sc, [DEFAULT, DEFAULT.with_(efa_efficiency=0.2)]),
                           (trn2, [DEFAULT, DEFAULT.with_(efa_efficiency=0.3), DEFAULT.with_(tensor_efficiency=0.5)])):
        times = step_times(scenario, cals)
        assert times == pytest.approx([replayed_step_time(one_step(scenario), c) for c in cals], rel=1e-12)
        assert times[1] > times[0]
    healthy = step_times(load_scenario(SCENARIOS / "llama2-70b-tp32pp4-trn2-64.yaml", ["faults.jitter=0"]), [DEFAULT])
    assert step_times(trn2, [DEFAULT])[0] > 1.5 * healthy[0]           # the degraded instance slows the step


def test_degraded_replicas_touched_unlike_are_replayed_per_setting():
    from ultracluster.layouts import setting_times

    sc = load_scenario(SCENARIOS / "llama2-70b-tp32pp4-trn2-64.yaml",
                       ["faults.jitter=0", "training.steps=1", "training.warmup_steps=0",
                        "faults.degraded=[{instances: [0, 1], efa_nics: 1}, {instances: [2], neuronlink_scale: 0.3}]"])
    assert setting_times.degraded_parts_of(one_step(sc)) is None
    cals = [DEFAULT, DEFAULT.with_(efa_efficiency=0.3)]
    assert step_times(sc, cals) == pytest.approx([replayed_step_time(one_step(sc), c) for c in cals], rel=1e-12)


def test_the_anchor_run_loads_without_a_working_directory(tmp_path, monkeypatch):
    # a Ray job's working directory can vanish under it; the anchor is an inlined scenario and needs none
    from ultracluster import uncertainty as unc

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    unc._anchor_scenario.cache_clear()
    row, sc, published = unc.anchor()
    assert row and published > 0 and sc.cluster.instance.startswith("trn2")


@pytest.mark.parametrize("n, d", [(1, 1), (97, 3), (4096, 12)])
def test_halton_is_scipys_unscrambled_sequence_bit_for_bit(n, d):
    from scipy.stats import qmc

    from ultracluster.uncertainty import halton

    assert np.array_equal(halton(n, d), qmc.Halton(d=d, scramble=False).random(n + 1)[1:])
    assert halton(3, 2).tolist() == [[0.5, 1 / 3], [0.25, 2 / 3], [0.75, 1 / 9]]


def test_weighted_quantiles_from_one_sort_are_each_quantile():
    from ultracluster.uncertainty import weighted_quantile

    rng = np.random.default_rng(5)
    x, w = rng.normal(size=4096), rng.random(4096)
    w /= w.sum()
    assert weighted_quantile(x, w, (0.1, 0.9)) == [weighted_quantile(x, w, 0.1), weighted_quantile(x, w, 0.9)]
    assert weighted_quantile(x, w, 0.1) < weighted_quantile(x, w, 0.9)


def test_grid_and_draw_settings_are_kept_by_value_and_are_what_they_would_be_made():
    """`uncertainty._grid_settings` and `_draw_setting` are kept (bounded, by the calibration's and factors' values):
    what they give is what making them again gives, and another calibration gets its own settings."""
    from ultracluster.cluster import build_cluster
    from ultracluster.uncertainty import DRAWS, _draw_setting, _grid_settings, factors_for, halton

    cl = build_cluster(load_scenario("scenarios/llama3.1-8b-128k-cp16-trn2.yaml"), 1)
    cal, factors = cl.calibration, tuple(factors_for(cl, pinned=False))
    grid = _grid_settings(cal, factors)
    assert _grid_settings(cal.with_(), factors) is grid            # an equal calibration: the kept grid
    assert grid == _grid_settings.__wrapped__(cal, factors) and grid[0] == cal and len(grid) == 1 + 4 * len(factors)
    other = _grid_settings(cal.with_(tensor_efficiency=cal.tensor_efficiency * 0.9), factors)
    assert other != grid and other[0].tensor_efficiency != cal.tensor_efficiency
    u = halton(DRAWS, len(factors))
    for j in (0, 17, DRAWS - 1):
        want = cal.with_(**{f.name: float(f.low + u[j, k] * (f.high - f.low)) for k, f in enumerate(factors)})
        assert _draw_setting(cal, factors, j) == want and _draw_setting(cal, factors, j) is _draw_setting(cal, factors, j)
    assert _grid_settings.cache_info().maxsize == 16 and _draw_setting.cache_info().maxsize == 1024
