"""Cross-validation re-derived: leave-one-layout-out and leave-one-group-out refit every fold from the published rows
and must give the figures docs/calibration.md and the README publish (calibration.json), within 0.5 points; and each
group-out fold's fit sees no row of its group.

This is the slow check the cheap staleness tests (test_calibration.py) cannot make: a model change that moves what
a layout left out costs, without a regeneration of the page, fails here. The folds run on two processes, once for
every test of this file (`rederived`). The group-out folds are the shipped ones (`shipped.group_folds`, refitted by
`shipped.fit_fold`, what scripts/calibrate.py writes); which rows belong to which group is derived here from the
CSV's own columns, not from the code under test.
"""
from __future__ import annotations

import csv
import json
import re
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from ultracluster.calibrate import shipped
from ultracluster.calibrate.training import DATA, Layouts
from ultracluster.calibration.fitted_files import FITTED

REPO = Path(__file__).resolve().parents[2]
TOLERANCE_POINTS = 0.5


def _fold(args):
    kind, arg = args
    from ultracluster.calibrate.shipped import fit_fold, group_folds, pct
    from ultracluster.calibrate.training import DATA, Layouts, base_calibration, fit

    lay = Layouts(DATA)
    if kind == "layout":
        others = [m for m in lay.certain if m not in arg]
        params, _ = fit(lay, others)
        err = lay.log_errors(base_calibration(**params), list(arg), scaling=False)
        return kind, {n: pct(float(e)) for n, e in zip(arg, err)}
    fold = group_folds(lay)[arg]
    _, err, _ = fit_fold(lay, fold)
    return fold.kind, {n: pct(e) for n, e in zip(fold.layouts, err)}


@pytest.fixture(scope="module")
def committed():
    return json.loads(FITTED.read_text())


@pytest.fixture(scope="module")
def lay():
    return Layouts(DATA)


@pytest.fixture(scope="module")
def rederived(committed, lay):
    folds = [("layout", (n,)) for n in committed["cross_validation"]["folds"]]
    folds += [("group", i) for i in range(len(shipped.group_folds(lay)))]
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


def _quoted(pattern: str, text: str, where: str) -> list[str]:
    m = re.search(pattern, text)
    assert m, f"{where} no longer quotes {pattern!r}"
    return list(m.groups())


def _within(rederived_pct: float, quoted: str) -> bool:
    """A quoted figure agrees within 0.5 points, beyond the quote's own rounding (half its last digit: the README
    quotes whole percent, docs/calibration.md tenths)."""
    digits = len(quoted.partition(".")[2])
    return abs(rederived_pct - float(quoted)) <= TOLERANCE_POINTS + 0.5 * 10 ** -digits


def test_the_figures_readme_and_calibration_page_quote_are_rederived(rederived):
    """The README's "How far to trust it" (leave-one-layout-out, and "A new kind of job": the group-out cells and
    families) and docs/calibration.md's group-out figures, read from the text and set against the refitted folds."""
    got = {kind: _summary([e for k, errs in rederived if k == kind for e in errs.values()])
           for kind in ("layout", "cells", "families")}
    readme = (REPO / "README.md").read_text()
    page = (REPO / "docs" / "calibration.md").read_text()
    quotes = {
        "README layout-out": (got["layout"], _quoted(
            r"A layout left out of the fit is missed by a median of ([\d.]+) % and at worst ([\d.]+) % "
            r"\(leave-one-layout-out\)", readme, "README.md")),
        "README cells": (got["cells"], _quoted(
            r"A new kind of job: with every run of a \(stack, pipelined or not\) cell left out at once the fit misses "
            r"that cell by a median of ([\d.]+) % and at worst ([\d.]+) %", readme, "README.md")),
        "README families": (got["families"], _quoted(
            r"with a model family left out, ([\d.]+) % and ([\d.]+) % \(leave-one-group-out\)", readme, "README.md")),
        "calibration.md cells": (got["cells"], _quoted(
            r"\*\*\(stack, pipelined or not\) cells\*\* left out: median \|error\| ([\d.]+) %, worst ([\d.]+) %",
            page, "docs/calibration.md")),
        "calibration.md families": (got["families"], _quoted(
            r"\*\*model families\*\* left out: median \|error\| ([\d.]+) %, worst ([\d.]+) %", page,
            "docs/calibration.md")),
    }
    for where, ((med, worst), (q_med, q_worst)) in quotes.items():
        assert _within(med, q_med), f"{where}: median re-derived {med:.2f} %, quoted {q_med} %"
        assert _within(worst, q_worst), f"{where}: worst re-derived {worst:.2f} %, quoted {q_worst} %"


# -- each group-out fold's fit sees no row of its group (cheap: no fit) --------------------------------------------

def _csv_rows() -> list[dict]:
    with open(DATA / "training.csv", newline="") as f:
        return list(csv.DictReader(f))


def _group_of(row: dict, kind: str) -> str:
    """A row's group, from its own columns: its (stack, pipelined or not) cell, or its model family (the preset
    without its size: llama2-13b -> llama2, gpt3-6.7b -> gpt3, llama3.1-8b -> llama3.1)."""
    if kind == "cells":
        return f"{row['stack']}/{'pipeline' if int(row['pp']) > 1 else 'no pipeline'}"
    return row["model"].rsplit("-", 1)[0]


def _read_by_the_fit(row: dict) -> bool:
    """The rows the full fit reads: the Trn1 `table` and `log` rows (layout medians) and the `pair` rows."""
    return (row["quality"] in ("table", "log") and row["instance"].startswith("trn1")) or row["quality"] == "pair"


def _fitted_layouts(rows: list[dict]) -> set[str]:
    return {r["layout"] for r in rows if r["quality"] in ("table", "log") and r["instance"].startswith("trn1")}


def test_each_group_out_fold_fits_none_of_its_groups_rows(lay):
    """For every fold, of the cells and of the model families: the rows held out are every row of the group, the
    fit reads none of them (by row id), and it reads every other row the full fit reads (a same-release pair whole
    or not at all)."""
    rows = _csv_rows()
    folds = shipped.group_folds(lay)
    for kind in ("cells", "families"):
        of_kind = [f for f in folds if f.kind == kind]
        assert sorted(n for f in of_kind for n in f.layouts) == sorted(_fitted_layouts(rows)), kind
        assert len({f.group for f in of_kind}) == len(of_kind)
        for f in of_kind:
            group_ids = {r["id"] for r in rows if _group_of(r, kind) == f.group}
            held = {r["id"] for r in f.held_out}
            fit_ids = [r["id"] for r in f.fit_rows]
            assert held == group_ids, f"{kind} {f.group}: holds out {sorted(held)}, its rows are {sorted(group_ids)}"
            leaked = sorted(set(fit_ids) & group_ids)
            assert not leaked, f"{kind} {f.group}: the fit reads rows of the group left out: {leaked}"
            assert len(fit_ids) == len(set(fit_ids))
            assert set(f.layouts) == _fitted_layouts([r for r in rows if r["id"] in group_ids])
            out_pairs = {r["sdk"] for r in rows if r["id"] in group_ids and r["quality"] == "pair"}
            expected = {r["id"] for r in rows if _read_by_the_fit(r) and r["id"] not in group_ids
                        and not (r["quality"] == "pair" and r["sdk"] in out_pairs)}
            assert set(fit_ids) == expected, f"{kind} {f.group}: the fit reads {sorted(fit_ids)}"


def test_the_shipped_group_out_fits_each_fold_on_its_fit_rows_alone(lay, monkeypatch):
    """What writes calibration.json's group_out (`leave_group_out`) hands the fit of each fold exactly that fold's
    fit rows: no row of the group left out reaches it (the fit itself replaced by a recorder; no refit here)."""
    seen = []

    def recorder(layouts, names, *args, **kwargs):
        seen.append((layouts, list(names)))
        return {}, 0.0

    monkeypatch.setattr(shipped, "fit", recorder)
    out = shipped.leave_group_out(lay)
    rows = _csv_rows()
    folds = shipped.group_folds(lay)
    assert len(seen) == len(folds) == sum(len(out[k]["groups"]) for k in ("cells", "families"))
    for fold, (layouts, names) in zip(folds, seen):
        group_ids = {r["id"] for r in rows if _group_of(r, fold.kind) == fold.group}
        ids = {r["id"] for r in layouts.rows}
        assert ids == {r["id"] for r in fold.fit_rows}
        assert not ids & group_ids, f"{fold.kind} {fold.group}: the fit saw {sorted(ids & group_ids)}"
        assert not set(names) & set(fold.layouts)
        assert all(r["id"] not in group_ids for n in names for r in layouts.fit_rows[n])
        assert out[fold.kind]["groups"][fold.group]["pair_kept"] == bool(layouts.pairs)
