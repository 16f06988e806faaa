"""What the shipped fit reports beside its factors: leave-one-layout-out cross-validation, interval coverage,
identifiability, ablation, the Trainium2 row and the residual check (`results`, written to
`ultracluster/calibration/calibration.json` by scripts/calibrate.py)."""
from __future__ import annotations

import hashlib
import math
import statistics
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..step import merit
from .training import (ENGINE_CHECK, FIT, INPUTS, MECHANISMS, REPO, RESIDUAL_CHECK, TRN2_PROBES, Layouts, rounded,
                       base_calibration, fit, is_read, polish)


def pct(x: float) -> float:
    return round(100 * (math.exp(x) - 1), 2)


def cross_validate(lay: Layouts) -> dict[str, dict]:
    """Leave-one-layout-out: refit on the other certain layouts and predict the one left out."""
    out = {}
    for n in lay.certain:
        others = [m for m in lay.certain if m != n]
        params, _ = fit(lay, others)
        out[n] = {"factors": params, "error_pct": pct(float(lay.log_errors(base_calibration(**params), [n])[0]))}
    return out


class Fold(NamedTuple):
    """One leave-one-group-out fold: its kind (`cells` or `families`), its group, the group's fitted layouts (what
    the fold predicts), the rows it holds out (every row of the group) and the rows its fit reads (`fit_rows`;
    the fit sees these and no other: `Layouts.of_rows`)."""
    kind: str
    group: str
    layouts: tuple[str, ...]
    held_out: tuple[dict, ...]
    fit_rows: tuple[dict, ...]


def group_folds(lay: Layouts) -> list[Fold]:
    """The leave-one-group-out folds, cells first, then model families. A fold's fit reads every row the full
    fit reads (`is_read`) but those of its group; a same-release pair enters whole or not at all (its ratio
    needs both rows), so a group holding a pair's layout takes the pair's scaling term out with it."""
    folds = []
    for kind, key in (("cells", lay.cell), ("families", lay.family)):
        groups: dict[str, list[str]] = {}
        for n in lay.certain:
            groups.setdefault(key[n], []).append(n)
        for g, members in groups.items():
            folds.append(fold_of(lay, kind, g, members, {r["layout"] for r in lay.rows if key[r["layout"]] == g}))
    return folds


def fold_of(lay: Layouts, kind: str, group: str, members, held_layouts: set[str]) -> Fold:
    """The fold that holds out every row of `held_layouts` and predicts `members` (its fitted layouts): its fit
    reads every row the full fit reads (`is_read`) but those, and a same-release pair whole or not at all."""
    held = tuple(r for r in lay.rows if r["layout"] in held_layouts)
    out_sdks = {r["sdk"] for r in held if r["quality"] == "pair"}
    fit_rows = tuple(r for r in lay.rows if is_read(r) and r["layout"] not in held_layouts
                     and not (r["quality"] == "pair" and r["sdk"] in out_sdks))
    return Fold(kind, group, tuple(members), held, fit_rows)


def fit_fold(lay: Layouts, fold: Fold) -> tuple[dict, list[float], bool]:
    """A fold's refit on its fit rows alone and the log errors of its group's layouts (against their medians
    over every release): (factors, errors, whether the pairs' scaling term was fitted)."""
    seen = lay.of_rows(r["id"] for r in fold.fit_rows)
    params, _ = fit(seen, seen.certain)
    err = lay.log_errors(base_calibration(**params), list(fold.layouts), scaling=False)
    return params, [float(e) for e in err], bool(seen.pairs)


def leave_group_out(lay: Layouts) -> dict:
    """Leave-one-group-out: every fitted layout of a group left out at once, the factors refitted on the rest,
    the group predicted (`group_folds`, `fit_fold`). Groups are the (stack, pipelined or not) cells and,
    separately, the model families: what a new kind of job costs in error. Per group its layouts' errors and the
    refitted factors; per kind the median and worst |error|."""
    out: dict[str, dict] = {}
    for fold in group_folds(lay):
        params, err, pair_kept = fit_fold(lay, fold)
        kind = out.setdefault(fold.kind, {"groups": {}, "errors": []})
        kind["groups"][fold.group] = {"layouts": {n: pct(e) for n, e in zip(fold.layouts, err)}, "factors": params,
                                      "pair_kept": pair_kept}
        kind["errors"] += [abs(pct(e)) for e in err]
    return {k: {"groups": v["groups"], "median_abs_error_pct": round(statistics.median(v["errors"]), 2),
                "worst_abs_error_pct": round(max(v["errors"]), 2)} for k, v in out.items()}


def _fold_out(lay: Layouts, members: list[str], kind: str) -> tuple[dict, list[float]]:
    """The factors refitted without `members`' rows (`fold_of`, `fit_fold`: the group folds' own seam) and the
    members' log errors under them."""
    params, err, _ = fit_fold(lay, fold_of(lay, kind, ",".join(members), members, set(members)))
    return params, err


def longest_sequence_out(lay: Layouts) -> dict:
    """Leave-one-group-out along the sequence length: every fitted layout at the longest sequence left out at
    once, the factors refitted on the shorter ones, the left-out layouts predicted."""
    longest = max(lay.scenarios[n].training.seq_len for n in lay.certain)
    members = [n for n in lay.certain if lay.scenarios[n].training.seq_len == longest]
    params, err = _fold_out(lay, members, "longest_sequence")
    return {"seq_len": longest, "layouts": {n: pct(float(e)) for n, e in zip(members, err)}, "factors": params,
            "worst_abs_error_pct": round(max(abs(pct(float(e))) for e in err), 2)}


def axis_values(lay: Layouts) -> dict[str, dict[str, float]]:
    """Each fitted layout's value on the axes that decide the compute model's error (`domain.GENERATION_RANGES`):
    tokens per core per microbatch and its published MFU."""
    from .. import operators as opslib
    from ..cluster import build_cluster
    from ..domain import scenario_tokens_per_core

    out: dict[str, dict[str, float]] = {"tokens_per_core": {}, "mfu": {}}
    for n in lay.certain:
        sc = lay.scenarios[n]
        cl = build_cluster(sc, sc.cluster.instances)
        peak = merit.peak_flop_per_s(cl.chips, cl.chip, sc.training.precision)
        out["tokens_per_core"][n] = scenario_tokens_per_core(sc)
        out["mfu"][n] = merit.mfu(opslib.model_flops_per_step(sc), peak, sc_step(lay, n))
    return out


def axis_growth(lay: Layouts) -> dict:
    """How the error grows as a layout moves away from the rows along each axis of `domain.GENERATION_RANGES`,
    measured by group-out: on each axis the layouts at its top (then its bottom) are left out at once, the factors
    refitted on the rest, and each left-out layout's |log error| divided by its |log distance| beyond the rest's
    range. The axis's growth is the largest of those ratios (calibration.json "axis_growth"; `domain.growth_log`
    widens an interval by it times the distance beyond the rows)."""
    values = axis_values(lay)
    folds, growth = {}, {}
    for axis, val in values.items():
        folds[axis], ratios = {}, []
        for side, edge in (("top", max), ("bottom", min)):
            end = edge(val.values())
            members = [n for n in lay.certain if val[n] == end]
            rest = [val[n] for n in lay.certain if n not in members]
            if len(rest) < 3:
                continue
            distance = abs(math.log(end / edge(rest)))
            if distance <= 0:
                continue
            _, err = _fold_out(lay, members, axis)
            r = [abs(float(e)) / distance for e in err]
            ratios += r
            folds[axis][side] = {"layouts": {n: pct(float(e)) for n, e in zip(members, err)},
                                 "value": round(end, 4), "rest_end": round(edge(rest), 4),
                                 "distance_log": round(distance, 4), "growth_per_log": round(max(r), 4)}
        growth[axis] = round(max(ratios), 4) if ratios else 0.0
    return {"folds": folds, "growth_per_log": growth}


def coverage(lay: Layouts, cv: dict[str, dict]) -> dict:
    """Cross-validated coverage of the 80 % interval (ultracluster.uncertainty): for each fitted layout, the
    interval around its leave-one-out prediction, with the fit part taken from the other folds' residuals
    only, against the layout's median and against every release's figure."""
    from ..layouts.setting_times import setting_step_times
    from ..uncertainty import Evidence, interval

    med_in, rows_in, rows_all, widths = 0, 0, 0, []
    for n in lay.certain:
        others = [abs(math.log1p(cv[m]["error_pct"] / 100)) for m in lay.certain if m != n]
        ev = Evidence(fit_log=float(np.quantile(others, 0.8)), release_sigma=lay.spread)
        cal = base_calibration(**cv[n]["factors"])
        sc = lay.scenarios[n]
        step = sc.training.global_batch / float(lay.predict(cal, [n])[0])
        iv = interval(sc, step, cal, ev, times=setting_step_times)
        widths.append(iv.high_s / iv.low_s - 1)
        med_in += iv.low_s <= sc.training.global_batch / lay.median[n] <= iv.high_s
        for r in lay.fit_rows[n]:
            rows_all += 1
            rows_in += iv.low_s <= sc.training.global_batch / float(r["seq_per_s"]) <= iv.high_s
    return {"layout_medians_covered": int(med_in), "layouts": len(lay.certain), "rows_covered": int(rows_in),
            "rows": int(rows_all), "coverage_pct": round(100 * rows_in / rows_all, 1),
            "median_full_width_pct": round(100 * float(np.median(widths)), 1)}


def identifiability(lay: Layouts, params: dict, rms: float, factors: tuple = FIT) -> dict[str, dict]:
    """Per fitted factor (of `factors`): the range over which the RMS log error stays within sqrt(rms^2 + spread^2),
    the other factors held at their fit, and the Trn2 probes' step time at the range's ends."""
    from ..scenario import load_scenario
    from ..runner import predict

    limit = math.sqrt(rms ** 2 + lay.spread ** 2)
    probes = [(label, load_scenario(doc)) for label, doc in TRN2_PROBES]
    out = {}
    for name, lo, hi, *_ in factors:
        grid = np.linspace(lo, hi, 41)
        if grid[0] == 0.0:
            grid[0] = hi * 1e-3
        ok = []
        for v in np.union1d(grid, [params[name]]):
            err = lay.log_errors(base_calibration(**{**params, name: float(v)}), lay.certain)
            if math.sqrt(float(np.mean(err ** 2))) <= limit:
                ok.append(float(v))
        low, high = min(ok), max(ok)
        moves = {}
        for label, sc in probes:
            t = [predict(sc, base_calibration(**{**params, name: v}))["step_time_s"] for v in (low, params[name], high)]
            moves[label] = [round(x, 3) for x in t]
        out[name] = {"low": rounded(low), "high": rounded(high), "at_bound": params[name] in (lo, hi),
                     "trn2_step_time_s": moves}
    return out


def ablation(lay: Layouts) -> dict[str, dict]:
    """Each mechanism off in turn, the other factors refitted: error per layout, RMS over the fitted layouts."""
    out = {}
    for label, field_name, off in MECHANISMS:
        params, rms = fit(lay, lay.certain, {field_name: off})
        params = {k: v for k, v in params.items() if k != field_name}
        err = lay.log_errors(base_calibration(**{field_name: off}, **params), lay.names)
        out[field_name] = {"label": label, "off": off, "factors": params, "rms_pct": round(100 * rms, 2),
                           "error_pct": {n: pct(float(e)) for n, e in zip(lay.names, err)}}
    return out


# The Trainium2-specific factor the one Trn2 row (`paper`) is fitted with, its search bounds, and the range the
# argument gives it (docs/trn2.md): from no synchronisation at all to the Trn1 value
TRN2_FIT = ("in_graph_sync_scale_trn2", 0.0, 3.0)
TRN2_ARGUED = (0.0, 1.0)


def fit_trn2(lay: Layouts, params: dict) -> dict:
    """Fit TRN2_FIT to the Trn2 row (its step time is monotone in the factor: bisection), then narrow every
    Trn2 uncertain factor to the part of its range over which that row stays within the release spread of its
    published figure, the other factors at their values (`pinned`, read by ultracluster.uncertainty)."""
    from ..cluster import build_cluster
    from ..runner import predict
    from ..uncertainty import factor_value, factors_for

    papers = [n for n in lay.names if lay.quality[n] == "paper"]
    if not papers:
        return {}
    name = papers[0]
    sc, target = lay.scenarios[name], sc_step(lay, name)
    cal = base_calibration(**params)

    def step(**change) -> float:
        return predict(sc, cal.with_(**change))["step_time_s"]

    lo, hi = TRN2_FIT[1], TRN2_FIT[2]
    before = step(**{TRN2_FIT[0]: 1.0})
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if step(**{TRN2_FIT[0]: mid}) < target else (lo, mid)
    value = rounded(0.5 * (lo + hi))
    cal = cal.with_(**{TRN2_FIT[0]: value})
    after = predict(sc, cal)["step_time_s"]
    pinned = {}
    for f in factors_for(build_cluster(sc, sc.cluster.instances, cal), pinned=False):
        central = factor_value(cal, f.name)
        grid = sorted(set(np.linspace(f.low, f.high, 9).tolist()) | {central})
        ok = [v for v in grid if abs(math.log(predict(sc, cal.with_(**{f.name: v}))["step_time_s"] / target))
              <= lay.spread]
        below = [v for v in grid if v <= central and all(u in ok for u in grid if v <= u <= central)]
        above = [v for v in grid if v >= central and all(u in ok for u in grid if central <= u <= v)]
        pinned[f.name] = [rounded(min(below or [central])), rounded(max(above or [central]))]
    return {"row": name, "published_step_s": round(target, 3), "factor": TRN2_FIT[0], "value": value,
            "argued_range": list(TRN2_ARGUED), "step_before_s": round(before, 3), "step_s": round(after, 3),
            "error_pct": round(100 * (after / target - 1), 2), "pinned": pinned,
            "scenario": sc.to_dict()}      # the run every Trn2 interval is weighted by (uncertainty.anchor)


def domain(lay: Layouts) -> dict:
    """Where the evidence is, per chip generation: the ranges of tp, pp, cp, sequence length and model size
    (billions of parameters) and the ZeRO stages and recomputations of the fitted and paper rows, and the best
    MFU a published run of that generation reached (`ultracluster.uncertainty.extrapolated` reads it)."""
    from .. import operators as opslib
    from ..cluster import build_cluster
    from ..uncertainty import domain_of

    items = []
    for n in lay.names:
        if not (n in lay.certain or lay.quality[n] == "paper"):
            continue
        sc = lay.scenarios[n]
        cl = build_cluster(sc, sc.cluster.instances)
        peak = merit.peak_flop_per_s(cl.chips, cl.chip, sc.training.precision)
        items.append((cl.chip.name, sc, merit.mfu(opslib.model_flops_per_step(sc), peak, sc_step(lay, n)), n))
    return domain_of(items)


def sc_step(lay: Layouts, name: str) -> float:
    """The published step time of a layout (its median's)."""
    return lay.scenarios[name].training.global_batch / lay.median[name]


def residual_check(lay: Layouts) -> dict:
    """The fit again with the unnamed per-layer residual free beside the fitted factors: how much of the data
    the named mechanisms leave to it (0 at its lower bound: the data want none)."""
    params, rms = fit(lay, lay.certain, factors=FIT + (RESIDUAL_CHECK,))
    return {"factors": params, "rms_pct": round(100 * rms, 2), "at_lower_bound": params[RESIDUAL_CHECK[0]] <= RESIDUAL_CHECK[1]}


def engine_check(lay: Layouts) -> dict:
    """The fit again with the stack engines' per-graph costs free beside the fitted factors (ENGINE_CHECK): where
    they come out and their identifiable ranges (a range down to its lower bound: the rows cannot tell the cost from
    nothing)."""
    params, rms = fit(lay, lay.certain, factors=FIT + ENGINE_CHECK)
    ranges = identifiability(lay, params, rms, ENGINE_CHECK)
    return {"factors": params, "rms_pct": round(100 * rms, 2),
            "ranges": {k: {"low": r["low"], "high": r["high"]} for k, r in ranges.items()},
            "unidentified": all(r["low"] <= b[1] * 1.001 for b, r in zip(ENGINE_CHECK, ranges.values()))}


def inputs_digest() -> str:
    h = hashlib.sha256()
    for rel in INPUTS:
        h.update(rel.encode())
        h.update((REPO / rel).read_bytes())
    return h.hexdigest()[:16]


def results(data: Path) -> dict:
    """Everything the fit reports, as a JSON-ready dict."""
    lay = Layouts(data)
    params, rms = polish(lay, lay.certain, *fit(lay, lay.certain)[:1])
    trn2 = fit_trn2(lay, params)
    if trn2:
        params = {**params, trn2["factor"]: trn2["value"]}
    cal = base_calibration(**params)
    pred = dict(zip(lay.names, lay.predict(cal)))
    cv = cross_validate(lay)
    cv_err = [abs(cv[n]["error_pct"]) for n in lay.certain]
    return {
        "fitted_to": "data/calibration/training.csv",
        "inputs_sha256": inputs_digest(),
        **params,
        "rms_log_error": round(rms, 5),
        "release_spread": round(lay.spread, 5),
        "layouts": {n: {"median_seq_per_s": lay.median[n], "predicted_seq_per_s": round(float(pred[n]), 3),
                        "error_pct": round(100 * (pred[n] / lay.median[n] - 1), 2), "fitted": n in lay.certain,
                        "quality": lay.quality[n],
                        **({"cv_error_pct": cv[n]["error_pct"]} if n in cv else {})} for n in lay.names},
        "cross_validation": {"median_abs_error_pct": round(statistics.median(cv_err), 2),
                             "worst_abs_error_pct": round(max(cv_err), 2),
                             "folds": {n: cv[n]["factors"] for n in lay.certain}},
        "group_out": {**leave_group_out(lay), "longest_sequence": longest_sequence_out(lay)},
        "axis_growth": axis_growth(lay),
        "interval_coverage": coverage(lay, cv),
        "identifiability": identifiability(lay, params, rms),
        "ablation": ablation(lay),
        "residual_check": residual_check(lay),
        "engine_check": engine_check(lay),
        "trn2": trn2,
        "domain": domain(lay),
        "rows": {r["id"]: round(100 * (pred[r["layout"]] / float(r["seq_per_s"]) - 1), 2) for r in lay.rows},
        "scaling": scaling_results(lay, cal, pred),
    }


def scaling_results(lay: Layouts, cal, pred: dict) -> dict:
    """The pairs' published scaling efficiencies beside the model's."""
    if not lay.pairs:
        return {}
    first = lay.pairs[0]
    model = (pred[first["large"]] / first["large_instances"]) / (pred[first["small"]] / first["small_instances"])
    return {"small": first["small"], "large": first["large"], "median_pct": round(100 * lay.scaling, 2),
            "predicted_pct": round(100 * float(model), 2),
            "pairs": {p["sdk"]: {"rows": list(p["ids"]), "published_pct": round(100 * p["scaling"], 2)} for p in lay.pairs}}


