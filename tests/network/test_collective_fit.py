"""The committed collective calibration is the fit of today's model to collectives.csv and meets its targets."""
import importlib.util
import json

from ultracluster.network.calibration import DEFAULT, FITTED, NetworkCalibration

REPO = FITTED.parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("fit_collectives", REPO / "scripts" / "fit_collectives.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fit_is_reproducible_and_not_stale(calibration_dir):
    fc = load_script()
    fitted = fc.fit(calibration_dir)
    committed = json.loads(FITTED.read_text())
    for name, value in fitted.to_dict().items():
        assert abs(value - committed["factors"][name]) <= 2e-3 * abs(value), (name, value, committed["factors"][name])
    text, section = fc.render(calibration_dir, NetworkCalibration(**committed["factors"]))
    assert FITTED.read_text() == text, "collectives_fit.json is stale: run python scripts/fit_collectives.py"
    doc = (REPO / "docs" / "collectives.md").read_text()
    assert fc.splice(doc, section) == doc, "docs/collectives.md is stale: run python scripts/fit_collectives.py"
    assert DEFAULT == NetworkCalibration(**committed["factors"])


def test_every_row_within_its_band(calibration_dir):
    rows = load_script().predictions(calibration_dir, DEFAULT)
    assert len(rows) == 19
    for r in rows:
        assert abs(r["error_pct"]) <= r["tolerance_pct"], r


def test_factors_are_few_and_physical():
    values = DEFAULT.to_dict()
    assert len(values) == 8
    assert all(0 < values[k] <= 1 for k in values if k.endswith("efficiency"))
    assert all(0 <= values[k] < 1e-3 for k in values if k.endswith("_s") or "_s_" in k)
