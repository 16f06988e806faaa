"""The committed collective calibration is the fit of today's model to collectives.csv and meets its targets;
the Trn2 defaults come from Trn1, the dated Trn2 rows fit only the `trn2-nccom-examples` profile."""
import importlib.util
import json
import sys

import pytest

from ultracluster import load_scenario
from ultracluster.cluster import build_cluster
from ultracluster.calibration.fitted_files import NETWORK_CALIBRATIONS, with_network_calibration
from ultracluster.calibration.fitted_files import DEFAULT as CALIBRATION
from ultracluster.uncertain_factors import FACTORS, for_generation
from ultracluster.errors import ScenarioError
from ultracluster.network.bench import bench_cluster
from ultracluster.network.calibration import DEFAULT, FITTED

REPO = FITTED.parents[2]
PROFILE = "trn2-nccom-examples"


def load_script():
    spec = importlib.util.spec_from_file_location("fit_collectives", REPO / "scripts" / "fit_collectives.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def script():
    return load_script()


@pytest.fixture(scope="module")
def fitted(script, calibration_dir):
    return script.fit_all(calibration_dir)


def test_fit_is_reproducible_and_not_stale(script, fitted, calibration_dir):
    committed = json.loads(FITTED.read_text())
    assert tuple(committed["factors"]) == script.OWN
    for name in script.OWN:
        value = getattr(fitted.default, name)
        assert abs(value - committed["factors"][name]) <= 2e-3 * abs(value), (name, value, committed["factors"][name])
    assert fitted.profile == committed["profiles"][PROFILE]
    text, section = script.render(calibration_dir, fitted)
    assert FITTED.read_text() == text, "collectives_fit.json is stale: run python scripts/fit_collectives.py"
    doc = (REPO / "docs" / "collectives.md").read_text()
    assert script.splice(doc, section) == doc, "docs/collectives.md is stale: run python scripts/fit_collectives.py"
    assert all(getattr(DEFAULT, k) == v for k, v in committed["factors"].items())
    assert NETWORK_CALIBRATIONS[PROFILE] == committed["profiles"][PROFILE]


def test_every_row_within_its_band_under_the_calibration_judged_on_it(script, fitted, calibration_dir):
    rows = script.judged(calibration_dir, fitted)
    assert len(rows) == 19
    assert {r["calibration"] for r in rows if r["instance"].startswith("trn2")} == {PROFILE}
    for r in rows:
        assert abs(r["error_pct"]) <= r["tolerance_pct"], r


def test_no_default_factor_is_fitted_to_the_dated_trn2_rows(script, calibration_dir, tmp_path):
    """Moving the four Trn2 rows (x3 slower) changes the profile, never the default."""
    text = (calibration_dir / "collectives.csv").read_text().splitlines()
    head, rows = text[0], text[1:]
    cols = head.split(",")
    moved = []
    for line in rows:
        cells = line.split(",")
        if cells[cols.index("instance_hint")] == "trn2":
            cells[cols.index("time_us")] = str(3 * float(cells[cols.index("time_us")]))
        moved.append(",".join(cells))
    (tmp_path / "collectives.csv").write_text("\n".join([head, *moved]) + "\n")
    other = script.fit_all(tmp_path)
    assert all(getattr(other.default, k) == getattr(DEFAULT, k) for k in script.OWN)
    assert other.profile["neuronlink_efficiency_trn2"] < NETWORK_CALIBRATIONS[PROFILE]["neuronlink_efficiency_trn2"]


def test_trn2_defaults_are_the_trn1_factors_and_nothing_sits_at_a_bound(script, fitted):
    d = fitted.default
    assert d.neuronlink_efficiency_trn2 == d.neuronlink_efficiency_trn1
    assert d.launch_s_trn2 == d.launch_s_trn1
    values = {k: getattr(d, k) for k in script.OWN}
    assert len(values) == 8
    assert all(0 < values[k] < 1 for k in values if k.endswith("efficiency") or "efficiency_" in k)
    assert all(0 < values[k] < 1e-3 for k in values if k.endswith("_s") or "_s_" in k)
    # the assumed NeuronLink-v2 efficiency lies strictly inside the range the Trn1 rows allow
    assert 0 < fitted.floor < d.neuronlink_efficiency_trn1 < 1


def test_the_floor_is_where_a_trn1_row_leaves_its_band(script, fitted, calibration_dir):
    trn1 = script._problem(calibration_dir, lambda r: r["instance_hint"] == "trn1")
    assert script._in_band(trn1, script._trn1_fit(trn1, fitted.floor))
    assert not script._in_band(trn1, script._trn1_fit(trn1, fitted.floor - 2 * script.FLOOR_STEP))


def test_registered_trn2_factors_bracket_their_defaults_and_name_real_fields():
    names = {f.name for f in FACTORS}
    for f in for_generation("trainium2"):
        central = getattr(CALIBRATION.network, f.name, None)
        if central is None:
            central = getattr(CALIBRATION, f.name)
        assert f.low <= central <= f.high, f
        assert f.why
    assert {"neuronlink_efficiency_trn2", "chip_efficiency", "efa_efficiency", "launch_s_trn2"} <= names
    nl = next(f for f in for_generation("trainium2") if f.name == "neuronlink_efficiency_trn2")
    assert nl.low == NETWORK_CALIBRATIONS[PROFILE]["neuronlink_efficiency_trn2"]   # the dated rows: pessimistic end


def _scenario(instance: str, **network):
    return load_scenario({"name": "nl", "model": {"preset": "llama2-70b"},
                          "training": {"seq_len": 4096, "global_batch": 64}, "parallelism": {"tp": 32},
                          "cluster": {"instance": instance, "instances": 1, "network": network}})


def test_the_scenario_field_selects_the_dated_profile():
    base = build_cluster(_scenario("trn2.48xlarge"), 1)
    dated = build_cluster(_scenario("trn2.48xlarge", calibration=PROFILE), 1)
    assert base.calibration.network == CALIBRATION.network   # the collective fit plus the training fit's sync
    assert dated.calibration.network == with_network_calibration(CALIBRATION, PROFILE).network
    assert dated.calibration.network.neuronlink_efficiency_trn2 < base.calibration.network.neuronlink_efficiency_trn2


def test_the_dated_profile_on_trn1_is_bad_input():
    with pytest.raises(ScenarioError) as err:
        _scenario("trn1.32xlarge", calibration=PROFILE)
    assert any(p.path == "cluster.network.calibration" for p in err.value.problems)


def test_bench_names_an_unknown_calibration():
    with pytest.raises(ScenarioError) as err:
        bench_cluster("trn2.48xlarge", 1, calibration="nope")
    assert err.value.problems[0].path == "--calibration"


# (docs/trn2.md's table of every Trn2 factor is generated: scripts/doc_tables.py, tests/test_doc_tables.py)
@pytest.mark.parametrize(("doc_name", "network_only", "generations"), [
    ("collectives.md", True, ("trainium", "trainium2"))])
def test_the_docs_table_of_uncertain_factors_is_the_registry(doc_name, network_only, generations):
    doc = (REPO / "docs" / doc_name).read_text()
    rows = [line.split("|")[1:-1] for line in doc.splitlines()
            if line.startswith("| `") and line.count("|") == 7 and ("trainium" in line)]
    shown = {(c[0].strip().strip("`"), c[1].strip()): (c[3].strip(), c[4].strip()) for c in rows}
    registered = {(f.name, g): f for f in FACTORS for g in f.generations if g in generations
                  and (not network_only or hasattr(DEFAULT, f.name))}
    assert set(shown) == set(registered)

    def value(text: str) -> float:
        return float(text.replace(" us", "")) * (1e-6 if text.endswith("us") else 1.0)

    for key, (low, high) in shown.items():
        f = registered[key]
        assert value(low) == pytest.approx(f.low, rel=5e-3), key
        assert value(high) == pytest.approx(f.high, rel=5e-3), key
