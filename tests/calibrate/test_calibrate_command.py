"""`ultracluster calibrate` as a command: bad rows, the files it writes, `--check` of a good, a damaged, an edited
and a forged profile, and a profile used by `sensitivity`, a run (`--calibration` and `calibration.profile`) and
`plan`."""
from __future__ import annotations

import json
import math
import re

import pytest

from ultracluster.calibrate.output import check_profile
from ultracluster.cli import main
from ultracluster.calibration import profile as fmt
from ultracluster.calibration.fitted_files import fitted
from ultracluster.scenario import load_scenario
from ultracluster import uncertainty
from ultracluster.layouts.setting_times import one_step, replayed_step_time, setting_step_times
from ultracluster.uncertainty import Z80
from ultracluster.cluster import build_cluster
from ultracluster.operators import model_flops_per_step


@pytest.fixture(scope="module")
def profile(tmp_path_factory, scenarios_dir):
    """A real two-row profile of two shipped scenarios, the user's cluster 8 % slower than the shipped fit."""
    d = tmp_path_factory.mktemp("profile")
    rows = []
    for name in ("calib-llama2-7b-tp8.yaml", "calib-gpt3-6.7b-tp8.yaml"):
        sc = load_scenario(scenarios_dir / name)
        step = 1.08 * replayed_step_time(one_step(sc), fitted())
        rows.append(f"{scenarios_dir / name},{sc.training.global_batch / step!r},my stack 2.21")
    (d / "m.csv").write_text("scenario,seq_per_s,note\n" + "\n".join(rows) + "\n")
    assert main(["calibrate", str(d / "m.csv"), "--out", str(d / "out" / "p.json"), "--quiet"]) == 0
    return d / "out" / "p.json"


def test_the_profile_and_its_page(profile):
    doc = json.loads(profile.read_text())
    assert doc["format"] == fmt.FORMAT and doc["checksum"] == fmt.checksum(doc)
    assert doc["fitted"] == ["tensor_efficiency"] and len(doc["rows"]) == 2
    assert all(abs(r["error_before_pct"] - 100 * (1 / 1.08 - 1)) < 1e-3 for r in doc["rows"])
    after = [r["error_after_pct"] for r in doc["rows"]]       # one factor for two rows: their misses balance
    assert after[0] * after[1] < 0 and max(map(abs, after)) < 2
    page = (profile.parent / "calibrate.html").read_text()
    assert "<svg" in page and page.count('r="4.5"') == 2 and page.count('r="5"') == 2    # after and before, per row
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//|url\(|@import""", page)
    assert "tensor_efficiency" in page and doc["checksum"] in page


def test_check_accepts_the_profile(profile, capsys):
    assert main(["calibrate", "--check", str(profile)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def test_check_refuses_a_damaged_or_edited_profile(profile, tmp_path, capsys):
    text = profile.read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    assert main(["calibrate", "--check", str(tmp_path / "cut.json")]) == 2
    assert "not JSON" in capsys.readouterr().err
    doc = json.loads(text)
    doc["factors"]["tensor_efficiency"] = 0.5
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    assert main(["calibrate", "--check", str(tmp_path / "edited.json")]) == 2
    assert "checksum does not match" in capsys.readouterr().err
    (tmp_path / "list.json").write_text("[1, 2]")
    assert main(["calibrate", "--check", str(tmp_path / "list.json")]) == 2
    assert "not a calibration profile (a JSON list" in capsys.readouterr().err


def test_check_finds_a_forged_profile(profile, tmp_path, capsys):
    """Edited and re-sealed (a new checksum): the rows no longer re-predict, or the factors are not their fit."""
    doc = json.loads(profile.read_text())
    doc["factors"]["tensor_efficiency"] = round(doc["factors"]["tensor_efficiency"] * 0.9, 3)
    (tmp_path / "forged.json").write_text(json.dumps(fmt.seal(doc)))
    assert main(["calibrate", "--check", str(tmp_path / "forged.json")]) == 1
    assert "the model changed since the profile was fitted" in capsys.readouterr().err
    for r in doc["rows"]:                             # forge the predictions too: still not the fit
        sc = load_scenario(r["scenario_resolved"])
        r["predicted_after_s"] = replayed_step_time(one_step(sc), fmt.calibration_of(doc))
    (tmp_path / "forged2.json").write_text(json.dumps(fmt.seal(doc)))
    _, problems = check_profile(tmp_path / "forged2.json")
    assert len(problems) == 1 and "tensor_efficiency" in problems[0] and "not the fit" in problems[0]


@pytest.mark.parametrize("name", fmt.FACTORS)
def test_a_resealed_factor_beyond_its_physical_bounds_is_refused_naming_it(profile, name):
    """A checksum says a profile is whole, not that it can be timed: every factor is checked against its bounds
    (FACTOR_BOUNDS, the fit's own), whatever the seal; so are the evidence and the fitted ranges."""
    lo, hi, why = fmt.FACTOR_BOUNDS[name]
    doc = json.loads(profile.read_text())
    for value in (lo / 10, hi * 10, 1e-300):
        forged = fmt.seal({**doc, "factors": {**doc["factors"], name: value}})
        with pytest.raises(fmt.ProfileError) as err:
            fmt.verify(forged, "p.json")
        assert f"p.json: factors.{name}: given {value!r}; allowed: {lo:g} to {hi:g} ({why})" == str(err.value)
    fmt.verify(fmt.seal({**doc, "factors": {**doc["factors"], name: hi}}), "p.json")     # the bound itself loads
    with pytest.raises(fmt.ProfileError, match=rf"ranges\.{name}: given \[{hi!r}, {lo!r}\]; allowed: \[low, high\]"):
        fmt.verify(fmt.seal({**doc, "ranges": {name: [hi, lo]}}), "p.json")
    with pytest.raises(fmt.ProfileError, match="evidence: given .*log errors from 0 to 3"):
        fmt.verify(fmt.seal({**doc, "evidence": {**doc["evidence"], "fit_log": 1e300}}), "p.json")


def test_a_resealed_tiny_tensor_efficiency_ends_run_with_exit_2(profile, tmp_path, scenarios_dir, capsys):
    doc = json.loads(profile.read_text())
    doc["factors"]["tensor_efficiency"] = 1e-300          # was a 4.3e298 s step with exit 0
    (tmp_path / "resealed.json").write_text(json.dumps(fmt.seal(doc)))
    out = tmp_path / "run"
    for argv in (["run", str(scenarios_dir / "smoke.yaml"), "--calibration", str(tmp_path / "resealed.json"),
                  "--out", str(out), "--quiet"], ["calibrate", "--check", str(tmp_path / "resealed.json")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "factors.tensor_efficiency: given 1e-300; allowed: 0.2 to 1" in err and "Traceback" not in err
    assert not out.exists()


def test_bad_rows_are_named_and_nothing_is_written(tmp_path, scenarios_dir, capsys):
    (tmp_path / "bad.yaml").write_text("name: bad\nmodel: {preset: llama2-7b}\ntraining: {seq_len: 4096}\n")
    (tmp_path / "m.csv").write_text(
        "scenario,step_time_s,seq_per_s,note\n"
        f"{scenarios_dir / 'calib-llama2-7b-tp8.yaml'},10,90,two quantities\n"
        f"{scenarios_dir / 'calib-llama2-7b-tp8.yaml'},-1,,negative\n"
        "missing.yaml,10,,no such file\n"
        "bad.yaml,10,,a scenario without a cluster\n")
    out = tmp_path / "out" / "p.json"
    assert main(["calibrate", str(tmp_path / "m.csv"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "row 1 (line 2): step_time_s / seq_per_s / tokens_per_s: given 'step_time_s, seq_per_s'" in err
    assert "row 2 (line 3): step_time_s: given '-1'; allowed: a finite number > 0" in err
    assert "row 3 (line 4): scenario missing.yaml: (file)" in err
    assert "row 4 (line 5): scenario bad.yaml: cluster" in err
    assert not out.parent.exists()
    (tmp_path / "u.yaml").write_text(f"- {{scenario: {scenarios_dir / 'smoke.yaml'}, step_s: 1}}\n")
    assert main(["calibrate", str(tmp_path / "u.yaml"), "--out", str(out)]) == 2
    assert "row 1: step_s: given 1; allowed: no such field" in capsys.readouterr().err
    assert main(["calibrate", str(tmp_path / "u.yaml")]) == 2
    assert "error: --out: given '<missing>'; allowed: the profile to write" in capsys.readouterr().err


def test_a_scenario_carries_the_profile_and_its_interval(profile, scenarios_dir, tmp_path):
    """`calibration.profile` (relative to the scenario file): the profile's factors and its own interval."""
    doc = json.loads(profile.read_text())
    text = (scenarios_dir / "calib-llama2-7b-tp8.yaml").read_text()
    (profile.parent / "mine.yaml").write_text(text + "calibration: {profile: p.json}\n")
    sc = load_scenario(profile.parent / "mine.yaml")
    assert sc.calibration.document == doc
    step = replayed_step_time(one_step(sc), fmt.calibration_for(sc))
    assert step == pytest.approx(doc["rows"][0]["predicted_after_s"], rel=1e-12)
    iv = uncertainty.interval(sc, step, times=setting_step_times)
    half = math.hypot(doc["evidence"]["fit_log"], Z80 * doc["evidence"]["release_sigma"])
    assert math.log(iv.high_s / step) == pytest.approx(math.hypot(half, iv.slow_log), rel=1e-9)
    assert iv.fit_label == "fit (the profile's leave-one-out residuals)"
    doc["factors"]["tensor_efficiency"] = 0.9                  # an edited profile: the scenario is refused
    (profile.parent / "edited.json").write_text(json.dumps(doc))
    (profile.parent / "mine2.yaml").write_text(text + "calibration: {profile: edited.json}\n")
    with pytest.raises(Exception, match="calibration.profile: given 'edited.json'.*checksum does not match"):
        load_scenario(profile.parent / "mine2.yaml")


def test_run_names_the_profile_in_its_summary(profile, scenarios_dir, tmp_path):
    from ultracluster.shards.local import local_shards
    from ultracluster.runner import run
    from ultracluster.report.check import check_run_dir

    path = str(profile.absolute())
    sc = load_scenario(scenarios_dir / "smoke.yaml", ["calibration=" + json.dumps({"profile": path})])
    rep = run(sc, out=tmp_path / "run", shards_factory=local_shards)
    plain = run(load_scenario(scenarios_dir / "smoke.yaml"), shards_factory=local_shards)
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["calibration_profile"] == path and plain.summary["calibration_profile"] is None
    te = json.loads(profile.read_text())["factors"]["tensor_efficiency"]
    assert te < fitted().tensor_efficiency and s["compute_s"] > plain.summary["compute_s"]
    assert check_run_dir(tmp_path / "run") == []
    from ultracluster.report import Report
    from ultracluster.report.compare import compare_keys

    back = Report.from_run_dir(tmp_path / "run").summary
    assert back["calibration_profile"] == path
    keys = compare_keys([back, plain.summary])               # compare shows which calibration each run used
    assert keys.index("calibration_profile") == keys.index("feasible") - 1
    assert "calibration_profile" not in compare_keys([plain.summary, plain.summary])
    resolved = load_scenario(json.loads((tmp_path / "run" / "scenario.json").read_text()))   # carries the profile
    assert resolved.calibration.document["checksum"] == json.loads(profile.read_text())["checksum"]


def test_sensitivity_flag(profile, scenarios_dir, tmp_path, capsys):
    out = tmp_path / "sens"
    assert main(["sensitivity", str(scenarios_dir / "calib-llama2-7b-tp8.yaml"), "--calibration", str(profile),
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fit (the profile's leave-one-out residuals)" in text
    assert main(["sensitivity", str(scenarios_dir / "calib-llama2-7b-tp8.yaml"), "--calibration",
                 str(tmp_path / "none.json"), "--out", str(out)]) == 2
    assert "calibration.profile" in capsys.readouterr().err


def test_plan_times_with_the_profile_and_its_top_layouts_carry_it(profile, scenarios_dir, tmp_path):
    from ultracluster.plan import plan

    shipped = plan(load_scenario(scenarios_dir / "smoke.yaml"), replay=False)
    mine = plan(load_scenario(scenarios_dir / "smoke.yaml", ["calibration=" + json.dumps({"profile": str(profile)})]),
                replay=False, out=tmp_path / "plan")
    best = {r["label"]: r["step_time_s"] for r in shipped.top}
    ratio = [r["step_time_s"] / best[r["label"]] for r in mine.top if r["label"] in best]
    assert ratio and all(1.0 < x < 1.09 for x in ratio)          # the profile's slower TensorE, in every layout
    top = load_scenario(tmp_path / "plan" / "top-1.yaml")            # written without nulls: the checksum holds
    assert top.calibration.document["checksum"] == json.loads(profile.read_text())["checksum"]


def test_off_the_profiles_domain_the_interval_widens_again(profile, scenarios_dir):
    """The profile's rows are two 7B TP8 layouts: a 70B TP32 job lies off their domain on several axes, and each
    adds the worst leave-one-out miss (the profile's or the shipped fit's, the larger) in quadrature."""
    from ultracluster.calibration.fitted_files import FITTED

    doc = json.loads(profile.read_text())
    assert doc["domain"]["trainium"]["tp"] == [8, 8] and doc["domain"]["trainium"]["pp"] == [1, 1]
    path = json.dumps({"profile": str(profile)})
    sc = load_scenario(scenarios_dir / "llama3.1-70b-trn1-32.yaml", ["calibration=" + path])
    step = replayed_step_time(one_step(sc), fmt.calibration_for(sc))
    iv = uncertainty.interval(sc, step, times=setting_step_times)
    assert {"tp", "params_b", "seq_len"} <= set(iv.extrapolated)
    inside = load_scenario(scenarios_dir / "calib-llama2-7b-tp8.yaml", ["calibration=" + path])
    own = replayed_step_time(one_step(inside), fmt.calibration_for(inside))      # its predicted MFU is the row's
    assert uncertainty.interval(inside, own, times=setting_step_times).extrapolated == []
    worst = max(json.loads(FITTED.read_text())["cross_validation"]["worst_abs_error_pct"],
                doc["evidence"]["loo_worst_abs_pct"])
    from ultracluster.domain import GENERATION_RANGES, growth_log, scenario_values
    from ultracluster.step import merit

    counted = [k for k in iv.extrapolated if k not in GENERATION_RANGES]   # those widen by their measured growth
    cl = build_cluster(sc, 1)
    mfu = merit.mfu(model_flops_per_step(sc), merit.peak_flop_per_s(cl.chips, cl.chip, "bf16"), step)
    h = math.sqrt(math.hypot(doc["evidence"]["fit_log"], Z80 * doc["evidence"]["release_sigma"]) ** 2
                  + (math.sqrt(len(counted)) * math.log1p(worst / 100)) ** 2
                  + growth_log(scenario_values(sc, mfu), "trainium", doc["domain"]) ** 2)
    assert math.log(iv.high_s / step) == pytest.approx(math.hypot(h, iv.slow_log), rel=1e-9)


@pytest.mark.parametrize("quantity,value,says", [
    ("step_time_s", "0.0001", "faster would be more than the chips' peak"),          # above peak
    ("step_time_s", "4.9e-324", "faster would be more than the chips' peak"),
    ("seq_per_s", "1.7e308", "faster would be more than the chips' peak"),
    ("step_time_s", "430000", "no fit reaches 4.3e+05"),                              # a million times slower
    ("step_time_s", "1.7e308", "no fit reaches 1.7e+308"),
    ("seq_per_s", "5e-324", "what the model gives this scenario with its fitted factors anywhere"),
    ("tokens_per_s", "1e-320", "what the model gives this scenario with its fitted factors anywhere"),
])
def test_a_row_no_factor_in_its_range_reaches_is_refused_and_nothing_written(tmp_path, scenarios_dir, capsys,
                                                                             quantity, value, says):
    scenario = scenarios_dir / "smoke.yaml"
    (tmp_path / "m.csv").write_text(f"scenario,{quantity},note\n{scenario},{value},run a\n{scenario},{value},run b\n")
    out = tmp_path / "out" / "p.json"
    assert main(["calibrate", str(tmp_path / "m.csv"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "nothing written" in err and "Traceback" not in err and says in err
    assert err.count(f"row 1 (line 2): {quantity} (scenario {scenario}): given") == 1     # each row named
    assert err.count(f"row 2 (line 3): {quantity} (scenario {scenario}): given") == 1
    assert not out.exists() and not (tmp_path / "out").exists()


def test_the_reachable_range_holds_the_shipped_fits_own_prediction(scenarios_dir):
    """What the refusal allows is the model's: the shipped fit's replayed step lies inside it."""
    from ultracluster.calibrate.command import scenario_rows_of, reachable
    from ultracluster.calibrate.measurements import read_measurements
    from ultracluster.runner import predict

    sc = scenarios_dir / "smoke.yaml"
    step = predict(load_scenario(sc))["step_time_s"]
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "m.csv").write_text(f"scenario,step_time_s\n{sc},{step}\n")
        (g,) = scenario_rows_of(read_measurements(Path(d) / "m.csv")).values()
    lo, hi = reachable(g, fitted(), 0.0)
    assert lo < step < hi and hi / lo > 2


def test_copied_rows_are_refused_naming_both_and_a_bom_is_read(tmp_path, scenarios_dir):
    from ultracluster.calibrate.measurements import read_measurements
    from ultracluster.errors import ScenarioError
    smoke = scenarios_dir / "calib-llama2-7b-tp8.yaml"
    text = f"scenario,step_time_s,note\n{smoke},2.5,a\n{smoke},2.6,a\n"      # two runs of one scenario: kept
    (tmp_path / "m.csv").write_bytes(b"\xef\xbb\xbf" + text.encode())        # Excel's "CSV UTF-8"
    assert [r.value for r in read_measurements(tmp_path / "m.csv")] == [2.5, 2.6]
    (tmp_path / "d.csv").write_text(text + f"{smoke},2.5,a\n" * 20)         # twenty copies of row 1
    with pytest.raises(ScenarioError) as err:
        read_measurements(tmp_path / "d.csv")
    assert len(err.value.problems) == 20
    assert err.value.problems[0].path == "row 3 (line 4)" and "the same row as row 1 (line 2)" in \
        err.value.problems[0].given and "each measured run once" in err.value.problems[0].allowed


def test_a_file_that_is_no_measurements_file_is_not_echoed(tmp_path, capsys):
    secret = "root:x:0:0:root:/root:/bin/bash\n" + "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n" * 30
    for name in ("passwd", "passwd.yaml"):
        (tmp_path / name).write_text(secret)
        assert main(["calibrate", str(tmp_path / name), "--out", str(tmp_path / "p.json")]) == 2
        err = capsys.readouterr().err
        assert "daemon" not in err and "nologin" not in err and "Traceback" not in err, err
    (tmp_path / "m.csv").write_text(f"scenario,step_time_s\n{tmp_path / 'passwd.yaml'},1.0\n")
    assert main(["calibrate", str(tmp_path / "m.csv"), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "daemon" not in err and f"a string of {len(secret.strip()):,} characters" in err, err
    assert not (tmp_path / "p.json").exists()
