"""Every prediction with its interval: what the fit, the Neuron releases and the unmeasured hardware leave open.

A step time carries three kinds of uncertainty (docs/uncertainty.md):

- the fit: how far the model misses a layout it was not fitted to, the leave-one-layout-out residuals of
  `scripts/calibrate.py` (their 80th percentile, in log space);
- the software: the same layout moved 10-20 % between Neuron releases, the between-release spread of
  `data/calibration/training.csv` (a standard deviation in log space, scaled to the 80 % two-sided quantile
  of a normal, 1.2816);
- the hardware: factors no published measurement pins down (`ultracluster.cluster.uncertain.FACTORS`, for
  Trn2, Trn3 and the Trn1 NeuronLink rate), each over its plausible range. They are propagated through the
  model itself: the step is priced once with every factor at the end that slows it and once at the end that
  speeds it (the widest interval the ranges allow), after one pricing per factor end decides which end that
  is. Chip factors fitted on Trn1 (TensorE efficiency, the per-layer residual) are also open on newer chips.

The fit and release parts combine in quadrature into one log half-width h; the hardware part adds in quadrature
to each side: low = t exp(-sqrt(h^2 + d_fast^2)), high = t exp(sqrt(h^2 + d_slow^2)). The point estimate is
always inside, and a chip with fewer measurements gets a wider interval.

Pricing is vectorized: every factor setting is a row of one table priced by the planner's fast path, the
replay's model over a row axis (`step_times`): two evaluations per interval (the factor ends, then the two
corners), in this process, no Ray, no files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace, field
from functools import lru_cache

import numpy as np

from .cluster.calibration import FITTED, TRN1, TRN2, Calibration, fitted, load_fitted
from .cluster.uncertain import UncertainFactor, for_generation

Z80 = 1.2815515655446004        # the 90th percentile of a standard normal: two-sided 80 %
INTERVAL_KEYS = ("step_time_low_s", "step_time_high_s", "tokens_per_s_low", "tokens_per_s_high")


@dataclass(frozen=True)
class Evidence:
    """What the calibration measured about its own errors (calibration.json)."""

    fit_log: float          # 80th percentile of |leave-one-layout-out log error| over the fitted layouts
    release_sigma: float    # between-release standard deviation of log seq/s
    ranges: tuple[tuple[str, float, float], ...] = ()    # a profile's fitted factors: (name, low, high) replaces
                                                         # the factor's uncertain range (never excluding its value)
    label: str = "fit (leave-one-layout-out residuals)"   # what the fit part is, and where it is documented
    source: str = "docs/calibration.md"
    release_label: str = "Neuron releases (between-release spread)"   # what the software part is
    domain: dict | None = None       # what a profile's rows span (None: the shipped fit's, calibration.json)
    worst_pct: float | None = None   # the worst leave-one-out |error| an axis off the domain adds (None: the fit's)

    @property
    def half_width_log(self) -> float:
        """Log half-width of the 80 % interval from the fit and the releases."""
        return math.hypot(self.fit_log, Z80 * self.release_sigma)


def _fitted() -> dict:
    """The committed calibration (calibration.json), read once per process (`load_fitted`)."""
    return load_fitted().documents[FITTED.name]


@lru_cache(maxsize=1)
def evidence() -> Evidence:
    """The fit's cross-validated residuals and the release spread, from the committed calibration."""
    doc = _fitted()
    cv = [abs(math.log1p(v["cv_error_pct"] / 100)) for v in doc["layouts"].values() if "cv_error_pct" in v]
    return Evidence(fit_log=float(np.quantile(cv, 0.8)) if cv else 0.0,
                    release_sigma=float(doc.get("release_spread", 0.0)))


def profile_evidence(scenario) -> Evidence | None:
    """The evidence of the calibration profile a scenario carries (`calibration.profile`): its own leave-one-out
    residuals, its rows' run-to-run spread and its fitted factors' identifiable ranges; None without a profile."""
    from .cluster.profile import evidence_of, scenario_profile

    doc = scenario_profile(scenario)
    if not doc:
        return None
    fit_log, sigma, ranges = evidence_of(doc)
    shipped_worst = _fitted().get("cross_validation", {}).get("worst_abs_error_pct", 0.0)
    own_worst = (doc.get("evidence") or {}).get("loo_worst_abs_pct") or 0.0
    return Evidence(fit_log=fit_log, release_sigma=sigma, ranges=tuple((k, lo, hi) for k, (lo, hi) in ranges.items()),
                    label="fit (the profile's leave-one-out residuals)", source=str(scenario.calibration.profile),
                    release_label="between runs (the profile's repeats, else releases)",
                    domain=doc.get("domain"), worst_pct=max(float(shipped_worst), float(own_worst)))


def chip_factors(generation: str, calibration: Calibration | None = None) -> list[UncertainFactor]:
    """Chip-model factors fitted on Trn1 that a newer chip's runs have not measured."""
    if generation == TRN1:
        return []
    calibration = calibration or fitted()
    ident = _fitted().get("identifiability", {})
    out = []
    te = calibration.tensor_efficiency
    lo, hi = ident.get("tensor_efficiency", {}).get("low", te), ident.get("tensor_efficiency", {}).get("high", te)
    out.append(UncertainFactor("tensor_efficiency", min(lo, 0.8 * te), min(1.0, max(hi, 1.2 * te)), (generation,),
                               "fitted on Trn1 only: the range Trn1's layouts allow, at least 20 % either way"))
    scale = calibration.network.in_graph_sync_scale_trn2
    argued = _fitted().get("trn2", {}).get("argued_range", [0.0, 1.0])
    out.append(UncertainFactor("in_graph_sync_scale_trn2", min(argued[0], scale), max(argued[1], scale), (generation,),
                               "the in-graph collective hand-off on Trn2 (Trn3 borrows it) as a multiple of Trn1's: "
                               "fitted to the one Trn2 training row, which cannot separate it from the other Trn2 "
                               "factors; from none to the Trn1 value (docs/trn2.md)"))
    return out


# The axes of the calibrated domain (calibration.json "domain", per chip generation): numeric ranges and sets
DOMAIN_RANGES = ("tp", "pp", "cp", "seq_len", "params_b")
DOMAIN_SETS = ("zero", "recompute")


def model_params_b(scenario) -> float:
    """The model's parameters in billions (dense and expert, embedding and head)."""
    from . import operators as opslib

    dense, expert = opslib.chunk_params_split(scenario.model, 1, np.array([float(scenario.model.layers)]), 1, 1)
    return float(dense.sum() + expert.sum()) / 1e9


def domain_of(items) -> dict:
    """The calibrated domain of measured runs, per chip generation: the ranges of tp, pp, cp, sequence length and
    model size (billions of parameters), the ZeRO stages and recomputations, the best MFU, and the runs' names.
    `items`: (generation, scenario, mfu, name) of each run (calibration.json "domain"; a profile's own)."""
    out: dict[str, dict] = {}
    for gen, sc, mfu, name in items:
        d = out.setdefault(gen, {"tp": [], "pp": [], "cp": [], "seq_len": [], "params_b": [], "zero": [],
                                 "recompute": [], "mfu_best": 0.0, "layouts": []})
        for k, v in (("tp", sc.parallelism.tp), ("pp", sc.parallelism.pp), ("cp", sc.parallelism.cp),
                     ("seq_len", sc.training.seq_len), ("params_b", model_params_b(sc))):
            d[k] = [min(d[k] + [v]), max(d[k] + [v])] if d[k] else [v, v]
        d["zero"] = sorted(set(d["zero"]) | {sc.training.zero})
        d["recompute"] = sorted(set(d["recompute"]) | {sc.training.recompute})
        d["mfu_best"] = round(max(d["mfu_best"], mfu), 4)
        d["layouts"].append(name)
    return out


def extrapolated(scenario, generation: str, dom: dict | None = None) -> list[str]:
    """The axes on which `scenario` lies outside what the calibration rows span ("generation" when no row of
    its chip generation exists); empty inside the calibrated domain. `dom`: a calibration profile's domain
    (default: the shipped fit's)."""
    value = {"tp": scenario.parallelism.tp, "pp": scenario.parallelism.pp, "cp": scenario.parallelism.cp,
             "seq_len": scenario.training.seq_len, "params_b": model_params_b(scenario),
             "zero": scenario.training.zero, "recompute": scenario.training.recompute}
    return extrapolated_rows(value, generation, dom)[0]


def extrapolated_rows(value: dict, generation: str, dom: dict | None = None) -> list[list[str]]:
    """`extrapolated` of many layouts of one chip generation at once: `value` maps each axis (tp, pp, cp, seq_len,
    params_b, zero, recompute) to a number or an array (one per layout); one list of axes per layout."""
    dom = _fitted().get("domain", {}) if dom is None else dom
    n = max([np.size(v) for v in value.values()] + [1])
    if not dom:
        return [[] for _ in range(n)]
    # the layout axes count as checked where a row of any generation spans them (the mechanisms they exercise
    # were checked there; what a newer chip changes is in its hardware factors); the generation by its own rows
    d = {k: [min(g[k][0] for g in dom.values()), max(g[k][1] for g in dom.values())] for k in DOMAIN_RANGES}
    d.update({k: sorted({v for g in dom.values() for v in g[k]}, key=str) for k in DOMAIN_SETS})
    off = {k: np.broadcast_to(~((d[k][0] * (1 - 1e-6) <= np.asarray(value[k], dtype=float))
                                & (np.asarray(value[k], dtype=float) <= d[k][1] * (1 + 1e-6))), (n,))
           for k in DOMAIN_RANGES}
    off.update({k: np.broadcast_to(~np.isin(np.asarray(value[k], dtype=object), np.asarray(d[k], dtype=object)), (n,))
                for k in DOMAIN_SETS})
    head = ["generation"] if generation not in dom else []
    axes = DOMAIN_RANGES + DOMAIN_SETS
    return [head + [k for k in axes if off[k][i]] for i in range(n)]


def mfu_best(generation: str, dom: dict | None = None) -> float | None:
    """The best MFU any published run of the generation reached, or a profile's run where that is higher (None:
    no run of it)."""
    best = [float(d[generation]["mfu_best"]) for d in (_fitted().get("domain", {}), dom or {}) if generation in d]
    return max(best) if best else None


def extrapolation_log(axes, worst_pct: float | None = None):
    """Log half-width each extrapolated axis adds, in quadrature: the worst leave-one-layout-out error of the
    fit, what the model missed by on a layout it had not seen (docs/uncertainty.md); `worst_pct` a profile's.
    `axes`: the list of axes, or (for many layouts) an array of their counts."""
    worst = _fitted().get("cross_validation", {}).get("worst_abs_error_pct", 0.0) if worst_pct is None else worst_pct
    if isinstance(axes, list):
        return math.sqrt(len(axes)) * math.log1p(worst / 100)
    return np.sqrt(np.asarray(axes, dtype=float)) * math.log1p(worst / 100)


def _scalar(*xs) -> bool:
    return all(np.ndim(x) == 0 for x in xs)


def half_width(ev: Evidence, axes):
    """The log half-width of the fit and release parts, widened by the extrapolated `axes` (a list, or an array
    of counts for many layouts): the part of the interval the uncertain factors' corners add to in quadrature."""
    ext = extrapolation_log(axes, ev.worst_pct)
    return math.hypot(ev.half_width_log, ext) if _scalar(ext) else np.hypot(ev.half_width_log, ext)


def widen(point, h, fast_log, slow_log):
    """(low, high) of the 80 % interval around `point` (seconds per step): the half-width `h` in quadrature with
    the factors' fast and slow corners (log ratios to the central setting). Numbers (the run's) or arrays (a
    plan's rows), the same arithmetic."""
    if _scalar(point, h, fast_log, slow_log):
        return point * math.exp(-math.hypot(h, fast_log)), point * math.exp(math.hypot(h, slow_log))
    return point * np.exp(-np.hypot(h, fast_log)), point * np.exp(np.hypot(h, slow_log))


def mfu_implausible(mfu, best: float | None):
    """Whether a predicted MFU is above the best any published run of the chip generation reached (`mfu_best`):
    not evidence-backed. A number or an array; False where either is unknown."""
    m = np.asarray(mfu, dtype=float)
    out = np.isfinite(m) & (m > (np.inf if best is None else best))
    return out if np.ndim(mfu) else bool(out)


def factors_for(cluster, pinned: bool = True, ranges: tuple = ()) -> list[UncertainFactor]:
    """Every uncertain factor that applies to the cluster's chip. On Trainium2, with `pinned`, each range is
    narrowed to the part over which the published Trn2 row stays within its release spread
    (calibration.json "trn2" "pinned", scripts/calibrate.py), never excluding the factor's central value.
    `ranges` ((name, low, high), a calibration profile's fitted factors) narrow their factors the same way."""
    gen = cluster.chip.name
    out = chip_factors(gen, cluster.calibration) + for_generation(gen)
    narrow = dict(_fitted().get("trn2", {}).get("pinned", {})) if pinned and gen == TRN2 else {}
    narrow.update({name: [lo, hi] for name, lo, hi in ranges})
    if not narrow:
        return out
    cal = cluster.calibration
    res = []
    for f in out:
        if f.name not in narrow:
            res.append(f)
            continue
        central = factor_value(cal, f.name)
        low, high = narrow[f.name]
        res.append(replace(f, low=min(max(f.low, low), central), high=max(min(f.high, high), central),
                           why=f.why + ("; narrowed to the calibration profile's identifiable range"
                                        if any(f.name == r[0] for r in ranges) else "; narrowed to what the Trn2 row allows")))
    return res


@dataclass
class FactorSwing:
    """One factor over its range: the step time at each end (the others central)."""

    factor: UncertainFactor
    central: float
    step_low_s: float       # step time with the factor at its low value
    step_high_s: float      # ... at its high value
    why: str = ""

    @property
    def swing_s(self) -> float:
        return abs(self.step_high_s - self.step_low_s)


@dataclass
class Interval:
    """An 80 % interval of the step time, with what it is made of."""

    point_s: float
    low_s: float
    high_s: float
    fit_log: float
    release_log: float
    slow_log: float          # log(step at the slow corner / point)
    fast_log: float          # log(point / step at the fast corner)
    swings: list[FactorSwing] = field(default_factory=list)
    extrapolated: list[str] = field(default_factory=list)   # axes outside the calibrated domain (widened)
    mfu_best: float | None = None                             # the best published MFU of the chip generation
    fit_label: str = Evidence.label       # what the fit part is (the shipped fit's or a profile's residuals)
    fit_source: str = Evidence.source
    release_label: str = Evidence.release_label

    def summary_keys(self, tokens_per_step: float) -> dict:
        return {"step_time_low_s": self.low_s, "step_time_high_s": self.high_s,
                "tokens_per_s_low": tokens_per_step / self.high_s, "tokens_per_s_high": tokens_per_step / self.low_s,
                "extrapolated": list(self.extrapolated)}


def factor_value(calibration: Calibration, name: str) -> float:
    """A factor's value in a calibration: a collective factor from its network part, else a chip factor."""
    return float(getattr(calibration.network, name) if hasattr(calibration.network, name) else getattr(calibration, name))


def _one_step(scenario):
    """The scenario priced by the interval: one step, storage off (its stalls are not a hardware uncertainty of
    the step); copied, not re-loaded, so nothing is read again from files (a job's directory may be gone)."""
    return scenario.model_copy(update={"training": scenario.training.model_copy(update={"steps": 1, "warmup_steps": 0}),
                                       "storage": None, "checkpoint": None})


def step_times(scenario, calibrations: list[Calibration]) -> np.ndarray:
    """Step time of one step of `scenario` under each calibration, in one vectorized evaluation.

    The settings are rows of one table priced by the planner's fast path (`layouts.fast.evaluate`, the replay's
    model over a row axis: each distinct per-rank shape and collective priced once, the pipelines of all rows
    run at once), each row with its own calibration (`Pricer(calibrations=...)`, column `cal`). Without jitter
    and stragglers it gives the replay's step exactly (tests/test_uncertainty.py); with them, the stages' mean
    speeds, which the interval only uses as ratios. A scenario with degraded instances (which the layout rows
    cannot carry) is replayed once per setting instead, in this process.
    """
    one = _one_step(scenario)
    if scenario.faults is not None and scenario.faults.degraded:
        return np.array([_replayed(one, cal) for cal in calibrations])
    import pandas as pd

    from .layouts.space import _own_row

    return layout_step_times(one, pd.DataFrame([_own_row(one)]), calibrations,
                             np.arange(len(calibrations))[None, :])[0]


def layout_step_times(one, rows, calibrations: list[Calibration], which: np.ndarray, pricers: dict | None = None,
                      shared_last_sends: bool = True) -> np.ndarray:
    """Step times [n, k] of one step of each layout row of `one` (a `_one_step` scenario; `rows` a table of n
    layouts) under the calibrations `which[i, j]` indexes, in one evaluation of the fast path (NaN: does not fit).
    `pricers`: Pricers kept across calls, by calibrations. `shared_last_sends`: the last gradient sends share
    links as in the replay (exact); a plan's many layouts price them alone, as its search does (docs/plan.md)."""
    from .layouts.fast import evaluate
    from .layouts.pricer import Pricer

    n, k = which.shape
    pricers = {} if pricers is None else pricers
    key = (tuple(calibrations), shared_last_sends)
    pr = pricers.get(key) or pricers.setdefault(key, Pricer(one, calibrations=key[0], shared_last_sends=key[1]))
    table = rows.reset_index(drop=True).iloc[np.repeat(np.arange(n), k)].reset_index(drop=True)
    table["cal"] = which.reshape(-1)
    out = evaluate(pr, table)
    return np.where(out["feasible"].to_numpy(), out["step_time_s"].to_numpy(dtype=float), np.nan).reshape(n, k)


def _replayed(one, cal: Calibration) -> float:
    """One replayed step (`emulate` with in-process shards): no Ray, no files."""
    from .actors.local import local_shards
    from .emulate import emulate

    res = emulate(one, local_shards, None, cal)
    return float(res.steps[-1].step_time_s) if res.feasible and res.steps else float("nan")


@dataclass
class Corners:
    """The uncertain factors of n layouts priced at their ends and at the two corners (arrays over the layouts)."""

    base: np.ndarray        # [n] step time at the central setting
    ends: np.ndarray        # [n, 2F] step time with factor f at its low (2f) and its high (2f + 1) end
    slow_log: np.ndarray    # [n] log(step at the slow corner / central), >= 0
    fast_log: np.ndarray    # [n] log(central / step at the fast corner), >= 0


def corners(price, cal: Calibration, factors: list[UncertainFactor], n: int) -> Corners:
    """Each factor's two ends, then the two corners (every factor at the end that slows the layout, and at the
    one that speeds it: decided per layout from its ends), in two evaluations. `price(calibrations, which)`
    gives the step times [n, k] of the n layouts under `calibrations[which[i, j]]` (`layout_step_times`)."""
    ends = [cal] + [cal.with_(**{f.name: x}) for f in factors for x in (f.low, f.high)]
    times = np.asarray(price(ends, np.tile(np.arange(len(ends)), (n, 1))), dtype=float)
    base = times[:, 0]
    lo, hi = times[:, 1::2], times[:, 2::2]
    zero = np.zeros(n)
    ok = np.isfinite(base) & (base > 0)
    if not factors or not ok.any():
        return Corners(base, times[:, 1:], zero, zero.copy())
    high_slow = ~(lo >= hi)                     # the high end slows this layout (NaN: as the high end)
    if len(factors) == 1:                       # one factor: its corners are its ends, priced already
        t = np.where(high_slow, times[:, [2, 1]], times[:, [1, 2]])
    else:
        patterns, inv = np.unique(high_slow, axis=0, return_inverse=True)
        inv = np.asarray(inv).reshape(-1)
        settings = []
        for p in patterns:
            settings.append(cal.with_(**{f.name: (f.high if s else f.low) for f, s in zip(factors, p)}))
            settings.append(cal.with_(**{f.name: (f.low if s else f.high) for f, s in zip(factors, p)}))
        t = np.asarray(price(settings, np.stack([2 * inv, 2 * inv + 1], axis=1)), dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        slow_log = np.where(ok & np.isfinite(t[:, 0]), np.maximum(0.0, np.log(t[:, 0] / base)), 0.0)
        fast_log = np.where(ok & np.isfinite(t[:, 1]) & (t[:, 1] > 0), np.maximum(0.0, np.log(base / t[:, 1])), 0.0)
    return Corners(base, times[:, 1:], slow_log, fast_log)


def interval(scenario, point_s: float, calibration: Calibration | None = None,
             evidence_: Evidence | None = None) -> Interval:
    """The 80 % interval of `scenario`'s step time around its replayed `point_s`.

    Args:
        scenario: a resolved Scenario.
        point_s: the step time the run measured (the interval is scaled around it).
        calibration: the calibration the run used (default: the fitted one).
        evidence_: the fit and release parts (default: the committed calibration's; the calibration script's
            coverage check passes each fold's own).
    """
    from .cluster import build_cluster
    from .cluster.profile import calibration_for

    cal = calibration_for(scenario, calibration)      # the scenario's calibration profile, else the shipped fit
    cluster = build_cluster(scenario, 1, cal)
    ev = evidence_ or profile_evidence(scenario) or evidence()
    factors = factors_for(cluster, ranges=ev.ranges)
    swings = []
    slow_log = fast_log = 0.0
    if factors:
        c = corners(lambda cals, which: step_times(scenario, [cals[j] for j in which[0]])[None, :], cal, factors, 1)
        base = float(c.base[0])
        scale = point_s / base if math.isfinite(base) and base > 0 else float("nan")  # around the replayed point
        for k, f in enumerate(factors):
            lo, hi = float(c.ends[0, 2 * k]), float(c.ends[0, 2 * k + 1])
            swings.append(FactorSwing(f, factor_value(cal, f.name), lo * scale, hi * scale, f.why))
        slow_log, fast_log = float(c.slow_log[0]), float(c.fast_log[0])
    axes = extrapolated(scenario, cluster.chip.name, ev.domain)        # off a profile's domain: its own rows'
    low_s, high_s = widen(point_s, half_width(ev, axes), fast_log, slow_log)
    return Interval(point_s=point_s, low_s=low_s, high_s=high_s, fit_log=ev.fit_log,
                    release_log=Z80 * ev.release_sigma, slow_log=slow_log, fast_log=fast_log,
                    swings=sorted(swings, key=lambda s: -s.swing_s), fit_label=ev.label, fit_source=ev.source,
                    release_label=ev.release_label, extrapolated=axes, mfu_best=mfu_best(cluster.chip.name, ev.domain))


def nan_keys() -> dict:
    """The interval keys of an infeasible run."""
    return {**{k: float("nan") for k in INTERVAL_KEYS}, "extrapolated": [], "mfu_implausible": False}


# ---------------------------------------------------------------------------------------------------------
# `ultracluster sensitivity`: which assumption a decision hangs on

SENSITIVITY_COLUMNS = ("factor", "central", "low", "high", "step_time_at_low_s", "step_time_at_high_s",
                       "swing_s", "swing_pct", "why")


def sensitivity_rows(iv: Interval) -> list[dict]:
    """One row per uncertain factor, largest swing first (the CSV's and the table's rows), then the fit and
    release parts of the interval as two more rows."""
    base = iv.point_s
    rows = [{"factor": s.factor.name, "central": s.central, "low": s.factor.low, "high": s.factor.high,
             "step_time_at_low_s": s.step_low_s, "step_time_at_high_s": s.step_high_s, "swing_s": s.swing_s,
             "swing_pct": 100 * s.swing_s / base if base else float("nan"), "why": s.factor.why} for s in iv.swings]
    for name, log, why in ((iv.fit_label, iv.fit_log, iv.fit_source),
                           (iv.release_label, iv.release_log, iv.fit_source if iv.fit_source != Evidence.source
                            else "data/calibration")):
        lo, hi = base * math.exp(-log), base * math.exp(log)
        rows.append({"factor": name, "central": float("nan"), "low": float("nan"), "high": float("nan"),
                     "step_time_at_low_s": lo, "step_time_at_high_s": hi, "swing_s": hi - lo,
                     "swing_pct": 100 * (hi - lo) / base if base else float("nan"), "why": why})
    return sorted(rows, key=lambda r: -r["swing_s"])


def tornado_text(iv: Interval, rows: list[dict], width: int = 40) -> str:
    """The tornado table for a terminal: a bar per factor from its fast end to its slow end around the point."""
    lo_all = min([r["step_time_at_low_s"] for r in rows] + [r["step_time_at_high_s"] for r in rows] + [iv.low_s])
    hi_all = max([r["step_time_at_low_s"] for r in rows] + [r["step_time_at_high_s"] for r in rows] + [iv.high_s])
    span = max(hi_all - lo_all, 1e-30)
    name_w = max(len(r["factor"]) for r in rows) if rows else 6
    out = [f"step time {iv.point_s:.4g} s, 80 % interval {iv.low_s:.4g} – {iv.high_s:.4g} s",
           f"{'factor':<{name_w}}  {'fast end':>10}  {'slow end':>10}  {'swing':>7}"]
    for r in rows:
        a, b = sorted((r["step_time_at_low_s"], r["step_time_at_high_s"]))
        i0, i1 = int((a - lo_all) / span * width), max(int((b - lo_all) / span * width), int((a - lo_all) / span * width) + 1)
        mid = int((iv.point_s - lo_all) / span * width)
        bar = "".join("|" if i == mid else ("#" if i0 <= i < i1 else " ") for i in range(width + 1))
        out.append(f"{r['factor']:<{name_w}}  {a:>10.4g}  {b:>10.4g}  {r['swing_pct']:>6.1f}%  {bar}")
    return "\n".join(out)
