"""The fitted files are read on first use, through one function, never at import: a missing or damaged one is
an error naming it (the CLI prints it in one line and exits 4), and importing the model still works.

Each case breaks a real copy of the package (its calibration.json or collectives_fit.json) and runs a fresh
interpreter on it, so nothing read by this test process is touched.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHIP = Path("ultracluster/calibration/calibration.json")
NETWORK = Path("ultracluster/network/collectives_fit.json")

# Imports the model and everything it is built from, then asks for the calibration and its uncertain factors.
PROBE = """
import sys
import ultracluster.chip, ultracluster.cluster, ultracluster.uncertain_factors, ultracluster.emulate
import ultracluster.network, ultracluster.uncertainty, ultracluster.layouts.steps, ultracluster.replay.engine
print("imported")
from ultracluster.calibration.fitted_files import CalibrationMissing, fitted
from ultracluster.uncertain_factors import for_generation
for ask in (fitted, lambda: for_generation("trainium2")):
    try:
        ask()
        print("read")
    except CalibrationMissing as err:
        print("error:", err)
"""


def _copy(tmp_path: Path) -> Path:
    """The package and its operator library, as a checkout holds them."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "ultracluster", root / "ultracluster", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "operators", root / "operators")
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root, env=env, timeout=120)


def _damage(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
    elif how == "not json":
        path.write_text(path.read_text()[:40])
    elif how == "not an object":
        path.write_text("[1, 2, 3]\n")
    elif how == "a value of the wrong type":
        doc = json.loads(path.read_text())
        if "factors" in doc:
            doc["factors"]["efa_efficiency"] = "fast"
        else:
            doc["tensor_efficiency"] = None
        path.write_text(json.dumps(doc))
    elif how == "a key missing":
        doc = json.loads(path.read_text())
        doc.pop("factors")
        path.write_text(json.dumps(doc))


CASES = [(CHIP, "missing"), (CHIP, "not json"), (CHIP, "not an object"), (CHIP, "a value of the wrong type"),
         (NETWORK, "missing"), (NETWORK, "not json"), (NETWORK, "a value of the wrong type"),
         (NETWORK, "a key missing")]


@pytest.mark.parametrize("file, how", CASES, ids=[f"{f.name}-{h.replace(' ', '-')}" for f, h in CASES])
def test_a_broken_file_is_named_when_first_used_and_imports_still_work(tmp_path, file, how):
    root = _copy(tmp_path)
    _damage(root / file, how)
    out = _run(root, "-c", PROBE)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "imported"
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines[1:]), out.stdout
    message = lines[1]
    assert str(root / file) in message                     # the file, by its full path
    assert "regenerate it with the fitting script" in message
    expected = {"missing": "No such file", "not json": "cannot be read", "not an object": "a JSON list",
                "a value of the wrong type": "damaged", "a key missing": "damaged ("}[how]
    assert expected in message, message


def test_the_intact_copy_reads(tmp_path):
    """The probe itself: an untouched copy reads both files and the factors."""
    out = _run(_copy(tmp_path), "-c", PROBE)
    assert out.stdout.split() == ["imported", "read", "read"], out.stdout + out.stderr


def test_the_cli_names_the_broken_file_in_one_line_and_exits_4(tmp_path):
    root = _copy(tmp_path)
    _damage(root / NETWORK, "not json")
    out = _run(root, "-m", "ultracluster", "collectives", "--instance", "trn1.32xlarge", "--op", "all_reduce",
               "--sizes", "1M")
    assert out.returncode == 4, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: {root / NETWORK}: the fitted calibration cannot be read")


def test_the_files_are_read_once_and_what_they_give_is_frozen():
    from ultracluster.calibration import fitted_files as cal
    from ultracluster import uncertain_factors

    first = cal.load_fitted()
    assert cal.load_fitted() is first                                      # cached: one read per process
    assert cal.DEFAULT is first.calibration and cal.NETWORK_DEFAULT is first.network
    assert cal.DEFAULT.network is first.network
    factors = uncertain_factors.factors()
    assert uncertain_factors.factors() is factors and isinstance(factors, tuple)   # built once, from the files read
    assert uncertain_factors.FACTORS == factors
    with pytest.raises(TypeError):
        cal.NETWORK_CALIBRATIONS["mine"] = {}                                   # no registry to add to
    with pytest.raises(TypeError):
        cal.NETWORK_CALIBRATIONS["trn2-nccom-examples"]["launch_s_trn2"] = 0.0
    # the same factor never twice for a generation (what the removed "module reloaded" guard was for)
    keys = [(f.name, g) for f in factors for g in f.generations]
    assert len(keys) == len(set(keys))
    with pytest.raises(AttributeError):
        cal.NO_SUCH_NAME  # noqa: B018


def test_the_fitted_document_is_the_callers_own():
    """Changing what `fitted_document()` returned changes nothing the next caller reads."""
    from ultracluster.calibration.fitted_files import fitted_document

    doc = fitted_document()
    worst = doc["cross_validation"]["worst_abs_error_pct"]
    doc["cross_validation"]["worst_abs_error_pct"] = -1.0
    doc["layouts"].clear()
    doc["added"] = True
    again = fitted_document()
    assert again["cross_validation"]["worst_abs_error_pct"] == worst
    assert again["layouts"] and "added" not in again
