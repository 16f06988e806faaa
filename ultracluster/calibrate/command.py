"""`ultracluster calibrate MEASUREMENTS --out PROFILE.json` and `--check PROFILE.json`.

measurements (`measurements.read_measurements`) → each scenario replayed once at the shipped fit (its
prediction before, the fast path's correction) → the factors the rows identify, fitted with every leave-one-out
fold at once (`fit`) → the fitted factors replayed (the predictions after) → the profile (JSON, sealed with its
checksum; `ultracluster.calibration.profile`) and calibrate.html beside it, both written atomically,
nothing written when anything fails. docs/calibration.md, "Your own cluster".
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..calibration import profile as fmt
from ..calibration.factors import Calibration
from ..calibration.fitted_files import fitted, fitted_document
from ..cluster.catalog import INSTANCES
from ..errors import Problem, ScenarioError
from ..step import merit
from .fit import (CANDIDATES, MIN_INDEPENDENT, MIN_SENSITIVITY, PENALTY, SHIPPED_WEIGHT, penalties, ScenarioRows, Timing, Problem as Fit,
                  fold_factors, identify, jacobian_at, residuals, shipped_factors, solve_all, terms_of, weighted_quantile)
from .measurements import Row, read_measurements

Z80 = 1.2815515655446004     # as ultracluster.uncertainty: the two-sided 80 % quantile of a normal


@dataclass
class Calibrated:
    """A finished calibration: the profile document and what the terminal and the page show."""

    profile: dict
    wall_s: float
    settings_timed: int
    replays: int


def replay_rows(scenario, cal: Calibration) -> dict:
    """One replayed step in this process (what `runner.predict` gives, without importing Ray): feasible, reason
    and step_time_s."""
    from ..emulate import in_process

    res = in_process(scenario, cal)
    ok = res.feasible and bool(res.steps)
    return {"feasible": ok, "reason": res.reason, "step_time_s": float(res.steps[-1].step_time_s) if ok else math.nan}


def scenario_rows_of(rows: list[Row]) -> dict[str, ScenarioRows]:
    from ..layouts.setting_times import one_step

    rows_by_scenario: dict[str, ScenarioRows] = {}
    for r in rows:
        key = str(r.path)
        if key not in rows_by_scenario:
            sc = r.scenario
            rows_by_scenario[key] = ScenarioRows(key, one_step(sc), [], INSTANCES[sc.cluster.instance].chip.name,
                                float(sc.training.global_batch), sc.cluster.instances)
        rows_by_scenario[key].rows.append(r)
    return rows_by_scenario


def _pct(log_ratio: float) -> float:
    return round(100 * math.expm1(log_ratio), 3)


def _shipped_evidence() -> tuple[list[float], float]:
    """The shipped fit's leave-one-layout-out |log errors| and its between-release spread (calibration.json)."""
    doc = fitted_document()
    cv = [abs(math.log1p(v["cv_error_pct"] / 100)) for v in doc["layouts"].values() if "cv_error_pct" in v]
    return cv, float(doc.get("release_spread", 0.0))


def reachable(g: ScenarioRows, base: Calibration, correction: float) -> tuple[float, float]:
    """The fastest and slowest step the model gives a scenario with its free factors anywhere in their physical
    ranges (CANDIDATES): the extremes over the ranges' corners (each factor moves the step one way), in one
    fast-path evaluation, with the scenario's replay/fast-path correction."""
    import itertools

    from ..layouts.setting_times import setting_step_times

    corners = [dict(zip(CANDIDATES, ends)) for ends in itertools.product(*CANDIDATES.values())]
    steps = np.asarray(setting_step_times(g.scenario, [base.with_(**c) for c in corners]), dtype=float) * math.exp(correction)
    steps = steps[np.isfinite(steps)]
    return (float(steps.min()), float(steps.max())) if steps.size else (math.nan, math.nan)


def unreachable(rows_by_scenario: dict[str, ScenarioRows], base: Calibration, correction: dict[str, float]) -> list[Problem]:
    """Rows no factor in its physical range can reach: a measured step faster than the chips' peak allows (MFU above
    100 %), or outside the steps the model gives with its factors anywhere in their ranges (`reachable`). Each
    names the row and what the model allows, in the row's own quantity."""
    from ..operators import model_flops_per_step

    problems = []
    for key, g in rows_by_scenario.items():
        sc = g.scenario
        spec = INSTANCES[sc.cluster.instance]
        peak = merit.peak_flop_per_s(sc.cluster.instances * spec.chips, spec.chip, sc.training.precision)
        at_peak = model_flops_per_step(sc) / peak          # the step at MFU 100 %
        lo, hi = reachable(g, base, correction[key])
        for r in g.rows:
            def shown(step: float) -> str:     # a step time in the row's own quantity
                value = {"step_time_s": step, "seq_per_s": sc.training.global_batch / step,
                         "tokens_per_s": sc.tokens_per_step / step}[r.measured]
                return f"{value:.4g}"
            what = f"{r.where}: {r.measured} (scenario {r.scenario_path})"
            limit = "at most" if r.measured != "step_time_s" else "at least"
            if r.step_time_s < at_peak:
                problems.append(Problem(what, r.value, (
                    f"{limit} {shown(at_peak)}: faster would be more than the chips' peak ({sc.cluster.instances} x "
                    f"{spec.name}, {peak:.4g} FLOP/s in {sc.training.precision}; MFU "
                    f"{100 * at_peak / r.step_time_s:.4g} %); check the row's scenario against the measured run")))
            elif math.isfinite(lo) and not lo <= r.step_time_s <= hi:
                ends = sorted((shown(lo), shown(hi)), key=float)
                problems.append(Problem(what, r.value, (
                    f"from {ends[0]} to {ends[1]}: what the model gives this scenario with its fitted factors anywhere "
                    f"in their physical ranges ({', '.join(f'{k} {a:g}..{b:g}' for k, (a, b) in CANDIDATES.items())}); "
                    f"no fit reaches {shown(r.step_time_s)}: check the row's scenario against the measured run")))
    return problems


def calibrate(measurements: str | Path, log=None) -> Calibrated:
    """Fit the factors the measured rows identify; the profile document (not written: `write_profile`)."""
    from ..layouts.setting_times import setting_step_times

    t0 = time.perf_counter()
    log = log or (lambda _: None)
    rows = read_measurements(measurements)
    base = fitted()
    shipped = shipped_factors(base)
    rows_by_scenario = scenario_rows_of(rows)
    log(f"calibrate: {len(rows)} row(s) of {len(rows_by_scenario)} scenario(s); replaying each at the shipped fit")
    before: dict[str, float] = {}
    problems = []
    correction = {}
    for key, g in rows_by_scenario.items():
        s = replay_rows(g.scenario, base)
        if not s["feasible"]:
            problems += [Problem(f"{r.where}: scenario {r.scenario_path}", "a layout the model says cannot run",
                                 f"a measured run that fits ({s['reason']})") for r in g.rows]
            continue
        before[key] = s["step_time_s"]
        fast = float(setting_step_times(g.scenario, [base])[0])
        correction[key] = math.log(before[key] / fast)
    if problems:
        raise ScenarioError(problems, str(measurements))
    problems = unreachable(rows_by_scenario, base, correction)        # before any fit: nothing is written
    if problems:
        raise ScenarioError(problems, str(measurements))
    timing = Timing(rows_by_scenario, base, correction)
    terms = terms_of(rows_by_scenario)
    names = list(CANDIDATES)
    jac0 = jacobian_at(shipped, rows_by_scenario, terms, timing, names)
    free, kept = identify(terms, rows_by_scenario, jac0, names)
    main = Fit(terms, free, dict(shipped))
    log(f"calibrate: fitting {', '.join(free) or 'nothing'} to {len(terms)} term(s)")
    solve_all([main], rows_by_scenario, timing, shipped)
    cal = base.with_(**main.factors)
    after = dict(before) if main.factors == shipped else {k: replay_rows(g.scenario, cal)["step_time_s"]
                                                           for k, g in rows_by_scenario.items()}
    main.residuals = residuals(terms, rows_by_scenario, {k: math.log(v) for k, v in after.items()})   # at the rounded factors
    # the Jacobian at the solution: the fit's own columns, the shipped point's for the factors it kept
    jac_all = jac0.copy()
    for j, k in enumerate(main.free):
        jac_all[:, names.index(k)] = main.jacobian[:, j]
    folds: dict[str, dict] = {}
    for i, t in enumerate(terms):
        if t.kind != "median":
            continue
        keep = [j for j in range(len(terms)) if j != i]
        rest = [terms[j] for j in keep]
        f_free, _ = identify(rest, rows_by_scenario, jac0[keep], names)
        folds[t.rows_by_scenario[0]] = {"free": f_free, "factors": fold_factors(main, jac_all, keep, f_free, names, shipped)}
    timing.time_settings({g: [f["factors"]] for g, f in folds.items()})
    for g, f in folds.items():
        f["log_step"] = timing.log_step(g, f["factors"])
    doc = _document(measurements, rows, rows_by_scenario, terms, shipped, main, folds, kept, before, after)
    return Calibrated(fmt.seal(doc), time.perf_counter() - t0, timing.settings,
                      len(rows_by_scenario) * (1 if main.factors == shipped else 2))


def _noise(rows_by_scenario: dict[str, ScenarioRows], public_spread: float) -> tuple[float, int]:
    """The spread between runs of one scenario: pooled over the rows' repeats, with the public between-release
    spread counted as SHIPPED_WEIGHT degrees of freedom (so it is the public spread until repeats show another)."""
    ss, dof = SHIPPED_WEIGHT * public_spread ** 2, SHIPPED_WEIGHT
    repeats = 0
    for g in rows_by_scenario.values():
        x = [math.log(r.throughput) for r in g.rows if not r.pair]
        if len(x) > 1:
            ss += float(np.var(x, ddof=1)) * (len(x) - 1)
            dof += len(x) - 1
            repeats += len(x) - 1
    return math.sqrt(ss / dof), repeats


def _document(measurements, rows, rows_by_scenario, terms, shipped, main: Fit, folds, kept, before, after) -> dict:
    cv_public, spread_public = _shipped_evidence()
    sigma, repeats = _noise(rows_by_scenario, spread_public)
    loo_logs = {}
    for key, fold in folds.items():
        med = next(t for t in terms if t.kind == "median" and t.rows_by_scenario == (key,))
        loo_logs[key] = -fold["log_step"] - med.log_target
    own = [abs(v) for v in loo_logs.values()]
    weights = [1.0] * len(own) + [SHIPPED_WEIGHT / len(cv_public)] * len(cv_public)
    fit_log = weighted_quantile(own + cv_public, weights, 0.8)
    ranges = {}
    for j, k in enumerate(main.free):
        col = main.jacobian[:, j] if main.jacobian is not None else np.zeros(1)
        half = sigma / math.sqrt(float(col @ col) + float(penalties([k], shipped)[0]) + 1e-12)
        lo, hi = CANDIDATES[k]
        ranges[k] = [float(f"{max(lo, main.factors[k] * math.exp(-half)):.3g}"),
                     float(f"{min(hi, main.factors[k] * math.exp(half)):.3g}")]
    out_rows = []
    for r in rows:
        key = str(r.path)
        fold = folds.get(key)
        loo = fold["log_step"] if fold else None
        out_rows.append({
            "row": r.number, "scenario": r.scenario_path, "scenario_name": r.scenario.name,
            "instance": r.scenario.cluster.instance, "instances": r.instances,
            "generation": rows_by_scenario[key].generation, "layout": _layout(r.scenario),
            "measured": r.measured, "value": r.value, "step_time_s": r.step_time_s,
            "note": r.note, "pair": r.pair or None,
            "predicted_before_s": before[key], "predicted_after_s": after[key],
            "error_before_pct": round(100 * (before[key] / r.step_time_s - 1), 3),
            "error_after_pct": round(100 * (after[key] / r.step_time_s - 1), 3),
            "loo_predicted_s": math.exp(loo) if loo is not None else None,
            "loo_error_pct": round(100 * (math.exp(loo) / r.step_time_s - 1), 3) if loo is not None else None,
            "loo_factors": {k: fold["factors"][k] for k in fold["free"]} if fold else None,
            "scenario_resolved": r.scenario.to_dict(),
        })
    moved = {k: {"shipped": shipped[k], "fitted": main.factors[k],
                 "change_pct": round(100 * (main.factors[k] / shipped[k] - 1), 2)} for k in main.free}
    notes = sorted({r.note for r in rows if r.note})
    return {
        "format": fmt.FORMAT, "version": fmt.VERSION,
        "written_by": f"ultracluster {_version()} calibrate",
        "measurements": str(measurements),
        "shipped_calibration": {"inputs_sha256": fitted_document().get("inputs_sha256"),
                                "factors": shipped},
        "factors": {k: main.factors[k] for k in CANDIDATES},
        "fitted": list(main.free),
        "kept": {k: {"value": shipped[k], "why": kept[k]} for k in CANDIDATES if k not in main.free},
        "moved": moved,
        "ranges": ranges,
        "method": {"penalty_weight": round(PENALTY, 6),
                   "penalty": "weight x sum over the fitted factors of log(factor / shipped)^2",
                   "min_sensitivity": MIN_SENSITIVITY, "min_independent": MIN_INDEPENDENT,
                   "iterations": main.iterations, "terms": len(terms),
                   "range": "the factor's change (the others at their fit) that raises the loss by the noise "
                            "squared, one noise sigma on one term (linearised)"},
        "terms": [{"kind": t.kind, "scenarios": [rows_by_scenario[g].rows[0].scenario_path for g in t.rows_by_scenario],
                   "rows": list(t.rows), "error_before_pct": _term_error(t, rows_by_scenario, before),
                   "error_after_pct": _term_error(t, rows_by_scenario, after),
                   "loo_error_pct": _pct(-loo_logs[t.rows_by_scenario[0]]) if t.kind == "median" and t.rows_by_scenario[0] in loo_logs
                   else None} for t in terms],
        "evidence": {"fit_log": round(fit_log, 6), "release_sigma": round(sigma, 6),
                     "loo_terms": len(own), "repeats": repeats,
                     "loo_median_abs_pct": round(100 * math.expm1(statistics.median(own)), 2) if own else None,
                     "loo_worst_abs_pct": round(100 * math.expm1(max(own)), 2) if own else None,
                     "half_width_pct": round(100 * math.expm1(math.hypot(fit_log, Z80 * sigma)), 2)},
        "domain": _domain(rows_by_scenario, terms),
        "hardware": {"instance_types": sorted({r.scenario.cluster.instance for r in rows}),
                     "generations": sorted({g.generation for g in rows_by_scenario.values()})},
        "software": {"notes": notes},
        "rows": out_rows,
    }


def _domain(rows_by_scenario: dict[str, ScenarioRows], terms) -> dict:
    """What the rows span per chip generation (the calibrated domain of `uncertainty.domain_of`): each scenario with
    a median term, its MFU at the measured median step; a run off it gets a wider interval."""
    from .. import operators as opslib
    from ..cluster import build_cluster
    from ..uncertainty import domain_of

    items = []
    for t in terms:
        if t.kind != "median":
            continue
        g = rows_by_scenario[t.rows_by_scenario[0]]
        cl = build_cluster(g.scenario, g.instances)
        peak = merit.peak_flop_per_s(cl.chips, cl.chip, g.scenario.training.precision)
        step = math.exp(-t.log_target)                     # the median throughput's step time
        items.append((g.generation, g.scenario, merit.mfu(opslib.model_flops_per_step(g.scenario), peak, step),
                      g.rows[0].scenario_path))
    return domain_of(items)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ultracluster")
    except PackageNotFoundError:        # a checkout on sys.path, not installed
        return "(not installed)"


def _term_error(t, rows_by_scenario, steps: dict[str, float]) -> float:
    """A median term's step-time error (predicted / measured median - 1), a pair's ratio error (predicted / measured - 1)."""
    r = float(residuals([t], rows_by_scenario, {k: math.log(v) for k, v in steps.items()})[0])
    return _pct(-r if t.kind == "median" else r)


def _layout(sc) -> str:
    p = sc.parallelism
    return f"tp{p.tp} pp{p.pp} dp{p.dp}" + (f" cp{p.cp}" if p.cp > 1 else "") + (f" ep{p.ep}" if p.ep > 1 else "")
