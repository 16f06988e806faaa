"""Cross-validation re-derived: leave-one-layout-out and leave-one-group-out refit every fold from the published rows
and must give the figures docs/calibration.md publishes (calibration.json), within 0.5 points.

This is the slow check the cheap staleness tests (test_calibration.py) cannot make: a model change that moves what
a layout left out costs, without a regeneration of the page, fails here. The folds run on two processes.
"""
from __future__ import annotations

import json
import statistics
from concurrent.futures import ProcessPoolExecutor

import pytest

from ultracluster.cluster.fitted_files import FITTED

TOLERANCE_POINTS = 0.5


def _fold(args):
    kind, left_out = args
    from ultracluster.calibrate.shipped import pct
    from ultracluster.calibrate.training import DATA, Layouts, base_calibration, fit

    lay = Layouts(DATA)
    others = [m for m in lay.certain if m not in left_out]
    keep_pair = kind == "layout" or not (set(left_out) & lay.pair_layouts)
    params, _ = fit(lay, others, scaling=keep_pair)
    err = lay.log_errors(base_calibration(**params), list(left_out), scaling=False)
    return kind, {n: pct(float(e)) for n, e in zip(left_out, err)}


@pytest.fixture(scope="module")
def committed():
    return json.loads(FITTED.read_text())


@pytest.fixture(scope="module")
def rederived(committed):
    folds = [("layout", (n,)) for n in committed["cross_validation"]["folds"]]
    for kind in ("cells", "families"):
        folds += [(kind, tuple(g["layouts"])) for g in committed["group_out"][kind]["groups"].values()]
    with ProcessPoolExecutor(max_workers=2) as pool:
        return list(pool.map(_fold, folds))


def _summary(errors: list[float]) -> tuple[float, float]:
    a = [abs(e) for e in errors]
    return statistics.median(a), max(a)


def test_leave_one_layout_out_is_what_the_docs_say(committed, rederived):
    errors = [e for kind, errs in rederived if kind == "layout" for e in errs.values()]
    med, worst = _summary(errors)
    cv = committed["cross_validation"]
    assert med == pytest.approx(cv["median_abs_error_pct"], abs=TOLERANCE_POINTS)
    assert worst == pytest.approx(cv["worst_abs_error_pct"], abs=TOLERANCE_POINTS)


@pytest.mark.parametrize("kind", ["cells", "families"])
def test_leave_one_group_out_is_what_the_docs_say(committed, rederived, kind):
    errors = [e for k, errs in rederived if k == kind for e in errs.values()]
    med, worst = _summary(errors)
    go = committed["group_out"][kind]
    assert med == pytest.approx(go["median_abs_error_pct"], abs=TOLERANCE_POINTS)
    assert worst == pytest.approx(go["worst_abs_error_pct"], abs=TOLERANCE_POINTS)

