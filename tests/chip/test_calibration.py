"""The committed calibration is the fit of today's model to the published rows, and meets its targets."""
import importlib.util
import json

from ultracluster.cluster.calibration import DEFAULT, FITTED


def load_script(repo):
    spec = importlib.util.spec_from_file_location("calibrate", repo / "scripts" / "calibrate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fit_is_reproducible_and_not_stale(calibration_dir):
    repo = FITTED.parents[2]
    cal = load_script(repo)
    fitted, doc = cal.outputs(calibration_dir)
    assert FITTED.read_text() == fitted, "ultracluster/cluster/calibration.json is stale: run scripts/calibrate.py"
    assert (repo / "docs" / "calibration.md").read_text() == doc, "docs/calibration.md is stale"
    values = json.loads(fitted)
    assert DEFAULT.tensor_efficiency == values["tensor_efficiency"]
    assert DEFAULT.op_overhead_s == values["op_overhead_s"]


def test_every_training_row_within_ten_percent():
    rows = json.loads(FITTED.read_text())["rows"]
    assert len(rows) == 4
    assert all(abs(err) <= 10.0 for err in rows.values()), rows


def test_factors_are_physical():
    assert 0 < DEFAULT.tensor_efficiency <= 1
    assert 0 <= DEFAULT.op_overhead_s < 1e-3
