"""Every prediction with its interval: what the fit, the Neuron releases and the unmeasured hardware leave open.

A step time carries three kinds of uncertainty (docs/uncertainty.md):

- the fit: how far the model misses a layout it was not fitted to, the leave-one-layout-out residuals of
  `scripts/calibrate.py` (their 80th percentile, in log space);
- the software: the same layout moved 10-20 % between Neuron releases, the between-release spread of
  `data/calibration/training.csv` (a standard deviation in log space, scaled to the 80 % two-sided quantile
  of a normal, 1.2816);
- the hardware: factors no published measurement pins down (`ultracluster.uncertain_factors.FACTORS`, for
  Trn2, Trn3 and the Trn1 NeuronLink rate), each over its argued range. They are propagated through the model
  as a distribution: every factor uniform over its range and independent, DRAWS settings of all of them, each
  weighted by how well it reproduces the published Trainium2 run (`anchor`); the weighted 10th and 90th
  percentiles of the step are the hardware part. Chip factors fitted on Trn1 (TensorE efficiency, the in-graph
  synchronisation) are also open on newer chips.

The fit and release parts combine in quadrature into one log half-width h; the hardware part adds in quadrature
to each side: low = t exp(-sqrt(h^2 + d_fast^2)), high = t exp(sqrt(h^2 + d_slow^2)). The point estimate is
always inside, and a chip with fewer measurements gets a wider interval.

This module is the interval's arithmetic only, pure: it never enters the model. The step time at a setting of
the factors comes from a function its caller gives it (`times(scenario, calibrations) -> seconds`, or `hardware`'s
`times(calibrations, which)` over layout rows): the model side's `layouts.setting_times.setting_step_times` (and
`layout_step_times` for a plan's rows), which times every setting as a row of one table on the planner's fast
path, two evaluations per interval (each factor's grid, then the settings beside the band's ends).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace, field
from functools import lru_cache
from typing import Callable

import numpy as np

from .calibration.factors import TRN1, TRN2, Calibration
from .calibration.fitted_files import fitted, fitted_read
from .uncertain_factors import UncertainFactor, for_generation
from .domain import (DOMAIN_RANGES, DOMAIN_SETS, cell, domain_of, extrapolated, extrapolated_columns,  # noqa: F401  (here
                     extrapolated_rows, growth_log, scenario_values, tokens_per_core, extrapolation_log, mfu_best, mfu_implausible, model_params_b)  # for their callers)
from .frozen import read_only

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



@lru_cache(maxsize=1)
def evidence() -> Evidence:
    """The fit's cross-validated residuals and the release spread, from the committed calibration."""
    doc = fitted_read()
    cv = [abs(math.log1p(v["cv_error_pct"] / 100)) for v in doc["layouts"].values() if "cv_error_pct" in v]
    return Evidence(fit_log=float(np.quantile(cv, 0.8)) if cv else 0.0,
                    release_sigma=float(doc.get("release_spread", 0.0)))


def profile_evidence(scenario) -> Evidence | None:
    """The evidence of the calibration profile a scenario carries (`calibration.profile`): its own leave-one-out
    residuals, its rows' run-to-run spread and its fitted factors' identifiable ranges; None without a profile."""
    from .calibration.profile import evidence_of, scenario_profile

    doc = scenario_profile(scenario)
    if not doc:
        return None
    fit_log, sigma, ranges = evidence_of(doc)
    shipped_worst = fitted_read().get("cross_validation", {}).get("worst_abs_error_pct", 0.0)
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
    doc = fitted_read()              # one read
    ident = doc.get("identifiability", {})
    out = []
    te = calibration.tensor_efficiency
    lo, hi = ident.get("tensor_efficiency", {}).get("low", te), ident.get("tensor_efficiency", {}).get("high", te)
    out.append(UncertainFactor("tensor_efficiency", min(lo, 0.8 * te), min(1.0, max(hi, 1.2 * te)), (generation,),
                               "fitted on Trn1 only: the range Trn1's layouts allow, at least 20 % either way"))
    scale = calibration.network.in_graph_sync_scale_trn2
    argued = doc.get("trn2", {}).get("argued_range", [0.0, 1.0])
    out.append(UncertainFactor("in_graph_sync_scale_trn2", min(argued[0], scale), max(argued[1], scale), (generation,),
                               "the in-graph collective hand-off on Trn2 (Trn3 borrows it) as a multiple of Trn1's: "
                               "fitted to the one Trn2 training row, which cannot separate it from the other Trn2 "
                               "factors; from none to the Trn1 value (docs/trn2.md)"))
    return out


def _scalar(*xs) -> bool:
    return all(np.ndim(x) == 0 for x in xs)


def half_width(ev: Evidence, axes, growth=0.0):
    """The log half-width of the fit and release parts, widened by the extrapolated `axes` (a list, or an array
    of counts for many layouts) and by `growth` (`domain.growth_log`: the measured growth of the error along the
    tokens-per-core and MFU axes beyond the rows), in quadrature: the part of the interval the uncertain factors'
    corners add to in quadrature."""
    ext = extrapolation_log(axes, ev.worst_pct)
    if _scalar(ext, growth):
        return math.sqrt(ev.half_width_log ** 2 + ext ** 2 + growth ** 2)
    return np.sqrt(ev.half_width_log ** 2 + np.asarray(ext) ** 2 + np.asarray(growth, dtype=float) ** 2)


def widen(point, h, fast_log, slow_log):
    """(low, high) of the 80 % interval around `point` (seconds per step): the half-width `h` in quadrature with
    the factors' fast and slow corners (log ratios to the central setting). Numbers (the run's) or arrays (a
    plan's rows), the same arithmetic."""
    if _scalar(point, h, fast_log, slow_log):
        return point * math.exp(-math.hypot(h, fast_log)), point * math.exp(math.hypot(h, slow_log))
    return point * np.exp(-np.hypot(h, fast_log)), point * np.exp(np.hypot(h, slow_log))


def factors_for(cluster, pinned: bool = True, ranges: tuple = ()) -> list[UncertainFactor]:
    """Every uncertain factor that applies to the cluster's chip. On Trainium2, with `pinned`, each range is
    narrowed to the part over which the published Trn2 row stays within its release spread
    (calibration.json "trn2" "pinned", scripts/calibrate.py), never excluding the factor's central value.
    `ranges` ((name, low, high), a calibration profile's fitted factors) narrow their factors the same way."""
    gen = cluster.chip.name
    out = chip_factors(gen, cluster.calibration) + for_generation(gen)
    narrow = dict(fitted_read().get("trn2", {}).get("pinned", {})) if pinned and gen == TRN2 else {}
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
    slow_log: float          # the hardware part's weighted 90th percentile of log(step / point)
    fast_log: float          # ... minus its 10th percentile
    swings: list[FactorSwing] = field(default_factory=list)
    extrapolated: list[str] = field(default_factory=list)   # axes outside the calibrated domain (widened)
    mfu_best: float | None = None                             # the best published MFU of the chip generation
    anchored: str = ""          # the published run the factor settings were weighted by ("": none moved it)
    fit_label: str = Evidence.label       # what the fit part is (the shipped fit's or a profile's residuals)
    fit_source: str = Evidence.source
    release_label: str = Evidence.release_label

    @property
    def release_source(self) -> str:
        """Where the software part's figures come from (a profile's own file, else the shipped data)."""
        return self.fit_source if self.fit_source != Evidence.source else "data/calibration"

    def summary_keys(self, tokens_per_step: float) -> dict:
        return {"step_time_low_s": self.low_s, "step_time_high_s": self.high_s,
                "tokens_per_s_low": tokens_per_step / self.high_s, "tokens_per_s_high": tokens_per_step / self.low_s,
                "extrapolated": list(self.extrapolated)}


def factor_value(calibration: Calibration, name: str) -> float:
    """A factor's value in a calibration: a collective factor from its network part, else a chip factor."""
    return float(getattr(calibration.network, name) if hasattr(calibration.network, name) else getattr(calibration, name))


#: times(scenario, calibrations) -> [len(calibrations)] seconds of one step of the scenario under each
#: (`layouts.setting_times.setting_step_times`)
StepTimes = Callable[[object, list], np.ndarray]


# The hardware part is read from DRAWS quasi-random settings of the factors (a Halton sequence: the same draws
# in every run), each factor uniform over its range, independent; the step at a setting is the sum of each
# factor's own effect, timed exactly at GRID points of its range (the ends, its central value and the two
# midpoints) and interpolated: 1 + 4 n settings timed for n factors (the central point is the base);
# tests/chip/test_uncertainty.py checks it against timing every draw.
DRAWS = 4096
GRID = 5


@lru_cache(maxsize=8)
def halton(n: int, d: int) -> np.ndarray:
    """The first n points of the d-dimensional Halton sequence in [0, 1)^d (bases: the first d primes); computed
    once per (n, d) and shared read-only by every interval. Bit for bit `scipy.stats.qmc.Halton(d,
    scramble=False).random(n + 1)[1:]` (tests/chip/test_uncertainty.py), written here because importing
    scipy.stats costs each run's driver 0.8 s more (measured on 2 shared cores, beside a 1 s `predict`)."""
    primes = [p for p in range(2, 200) if all(p % q for q in range(2, int(p ** 0.5) + 1))][:d]
    out = np.zeros((n, d))
    for j, b in enumerate(primes):
        k, f = np.arange(1, n + 1), 1.0
        while k.any():
            f /= b
            out[:, j] += f * (k % b)
            k //= b
    return read_only(out)


def _grid(f: UncertainFactor, central: float) -> np.ndarray:
    """Where a factor's own effect is timed: its ends, its central value and the two midpoints."""
    return np.array([f.low, 0.5 * (f.low + central), central, 0.5 * (central + f.high), f.high])


@lru_cache(maxsize=16)
def _grid_settings(cal: Calibration, factors: tuple) -> tuple[Calibration, ...]:
    """The central setting, then each factor's GRID points but the central one (the others central). Kept for the
    last 16 (calibration, factors), by value: every interval of a chip generation under one calibration times the
    same grid, whose settings then keep their hashes (`calibration.factors._kept_hash`; read-only: Calibrations are
    frozen)."""
    return (cal,) + tuple(cal.with_(**{f.name: float(v)}) for f in factors
                          for j, v in enumerate(_grid(f, factor_value(cal, f.name))) if j != GRID // 2)


@lru_cache(maxsize=1024)
def _draw_setting(cal: Calibration, factors: tuple, j: int) -> Calibration:
    """Draw j's setting of the factors (the Halton sequence's point j over their ranges), kept as `_grid_settings`
    (the last 1024, by value): an interval times the draws nearest its band's ends, the same in runs alike."""
    u = halton(DRAWS, len(factors))
    return cal.with_(**{f.name: float(f.low + u[j, k] * (f.high - f.low)) for k, f in enumerate(factors)})


def _grid_times(t: np.ndarray, factors: tuple) -> np.ndarray:
    """[n, factors, GRID] from step times [n, settings] over `_grid_settings` (the central point is the base)."""
    return np.insert(t[:, 1:].reshape(t.shape[0], len(factors), GRID - 1), GRID // 2, t[:, :1], axis=2)


def _draws(factors: tuple, cal: Calibration, base: float, grid_times: np.ndarray) -> np.ndarray:
    """log(step / base) at each of the DRAWS settings, each factor's effect added in time (its grid, linear)."""
    u = halton(DRAWS, len(factors))
    delta = np.zeros(DRAWS)
    for k, f in enumerate(factors):
        y = np.where(np.isfinite(grid_times[k]), grid_times[k], base) - base
        delta += np.interp(f.low + u[:, k] * (f.high - f.low), _grid(f, factor_value(cal, f.name)), y)
    return np.log(np.maximum(base + delta, 1e-6 * base) / base)


def anchor() -> tuple[str, object, float] | None:
    """The published Trainium2 run every Trn2-side factor setting is weighted by: (row, scenario, step s), from
    calibration.json "trn2" (None without one)."""
    t2 = fitted_read().get("trn2") or {}
    if "scenario" not in t2:
        return None
    return t2["row"], _anchor_scenario(), float(t2["published_step_s"])


def _uniform() -> tuple[np.ndarray, str]:
    """Every draw weighted alike, by no run."""
    return read_only(np.full(DRAWS, 1.0 / DRAWS)), ""


@lru_cache(maxsize=1)
def _anchor_scenario():
    from .scenario import load_scenario

    return load_scenario(fitted_read()["trn2"]["scenario"])


@lru_cache(maxsize=16)
def _weights(factors: tuple, cal: Calibration, times: StepTimes) -> tuple[np.ndarray, str]:
    """How well each draw reproduces the anchor run (its settings timed by `times`): a normal likelihood of its
    log error with the fit's and the releases' 80 % half-width as the 80 % band (uniform when no factor moves the
    anchor). Cached: the same for every run of a chip generation under one calibration."""
    a = anchor()
    if a is None:
        return _uniform()
    row, sc, published = a
    t = times(sc, _grid_settings(cal, factors))
    base, grid_times = float(t[0]), _grid_times(t[None, :], factors)[0]
    if not math.isfinite(base) or np.allclose(grid_times, base, rtol=1e-9, equal_nan=True):
        return _uniform()
    err = math.log(base / published) + _draws(factors, cal, base, grid_times)
    w = np.exp(-0.5 * (err * Z80 / evidence().half_width_log) ** 2)
    return read_only(w / w.sum()), row


def weighted_quantile(x: np.ndarray, w: np.ndarray, q) -> float | list[float]:
    """The weighted q-quantile of x; with q a sequence, each (x sorted once)."""
    order = np.argsort(x)
    xs, cum = x[order], np.cumsum(w[order])
    at = lambda p: float(xs[min(np.searchsorted(cum, p), x.size - 1)])     # noqa: E731
    return [at(p) for p in q] if isinstance(q, (tuple, list)) else at(q)


NEAR = 8        # draws timed exactly beside each quantile of the interpolated steps


@dataclass
class Hardware:
    """The hardware part of n layouts' intervals (arrays over the layouts)."""

    base: np.ndarray        # [n] the step at the central setting
    grid: np.ndarray        # [n, factors, GRID] the step at each factor's grid points, the others central
    slow_log: np.ndarray    # [n] the weighted 90th percentile of log(step / base), >= 0
    fast_log: np.ndarray    # [n] minus its 10th percentile, >= 0
    anchored: str = ""      # the published run the settings were weighted by ("": none moved it)


def hardware(times, cal: Calibration, factors: tuple, n: int, weights) -> Hardware:
    """The factors' part of the interval of n layouts, in two evaluations: each factor's GRID points (one table
    for every layout), then, for each layout, the NEAR draws closest to each of its weighted 10th and 90th
    percentiles of the interpolated steps (`_draws`), timed exactly: the percentiles are corrected by the median
    interpolation error there (the factors' joint effects, which the per-factor grids miss, are largest where the
    band ends). `times(calibrations, which)` gives the step times [n, k] of the layouts under
    `calibrations[which[i, j]]` (the model side's `layouts.setting_times`: `setting_step_times` for one scenario,
    `layout_step_times` for a plan's rows); `weights()` gives the draws' weights and the run they come from
    (`weights_for`), asked only when needed."""
    grid_cals = _grid_settings(cal, factors)
    t = np.asarray(times(grid_cals, np.tile(np.arange(len(grid_cals)), (n, 1))), dtype=float)
    out = Hardware(t[:, 0], _grid_times(t, factors), np.zeros(n), np.zeros(n))
    ok = np.flatnonzero(np.isfinite(out.base) & (out.base > 0))
    if not ok.size:
        return out
    w, out.anchored = weights()
    xs = {i: _draws(factors, cal, float(out.base[i]), out.grid[i]) for i in ok}
    qs = {i: weighted_quantile(xs[i], w, (0.1, 0.9)) for i in ok}
    if len(factors) == 1:                         # one factor: its grid is its whole effect
        for i in ok:
            out.slow_log[i], out.fast_log[i] = max(0.0, qs[i][1]), max(0.0, -qs[i][0])
        return out
    near = np.zeros((n, 2 * NEAR), dtype=np.int64)      # plausible draws first
    for i in ok:
        near[i] = np.concatenate([np.argsort(np.abs(xs[i] - q) - 1e9 * (w > 0.1 / DRAWS))[:NEAR] for q in qs[i]])
    draws = np.unique(near[ok])
    settings = [_draw_setting(cal, factors, j) for j in draws.tolist()]
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.log(np.asarray(times(settings, np.searchsorted(draws, near)), dtype=float) / out.base[:, None])
    for i in ok:
        q10, q90 = (q + float(np.nanmedian(e - xs[i][idx])) for q, e, idx in
                    zip(qs[i], exact[i].reshape(2, NEAR), near[i].reshape(2, NEAR)))
        out.slow_log[i], out.fast_log[i] = max(0.0, q90), max(0.0, -q10)
    return out


def interval(scenario, point_s: float, calibration: Calibration | None = None,
             evidence_: Evidence | None = None, *, times: StepTimes) -> Interval:
    """The 80 % interval of `scenario`'s step time around its replayed `point_s`.

    The hardware part is the 10th and 90th percentiles of the step over the factors' ranges (DRAWS settings),
    each setting weighted by how well it reproduces the published Trainium2 run (`anchor`; the shipped fit
    only, not a calibration profile's), so a setting that run rules out does not widen the band (`hardware`).

    Args:
        scenario: a resolved Scenario.
        point_s: the step time the run measured (the interval is scaled around it).
        calibration: the calibration the run used (default: the fitted one).
        evidence_: the fit and release parts (default: the committed calibration's; the calibration script's
            coverage check passes each fold's own).
        times: times one step of a scenario under each of a list of calibrations (the model side's
            `layouts.setting_times.setting_step_times`); called only when a factor applies.
    """
    from .cluster import build_cluster
    from .calibration.profile import calibration_for

    cal = calibration_for(scenario, calibration)      # the scenario's calibration profile, else the fit
    cluster = build_cluster(scenario, 1, cal)
    profile = profile_evidence(scenario)
    ev = evidence_ or profile or evidence()
    factors = tuple(factors_for(cluster, pinned=False, ranges=ev.ranges))
    swings, slow_log, fast_log, anchored = [], 0.0, 0.0, ""
    if factors:
        hw = hardware(lambda cals, which: times(scenario, [cals[j] for j in which[0]])[None, :], cal, factors,
                      1, lambda: weights_for(factors, cal, profile, cluster.chip.name, times=times))
        base = float(hw.base[0])
        if math.isfinite(base) and base > 0:
            scale = point_s / base                        # around the replayed point
            for k, f in enumerate(factors):
                swings.append(FactorSwing(f, factor_value(cal, f.name), float(hw.grid[0, k, 0]) * scale,
                                          float(hw.grid[0, k, -1]) * scale, f.why))
            slow_log, fast_log, anchored = float(hw.slow_log[0]), float(hw.fast_log[0]), hw.anchored
    from . import operators as opslib
    from .step import merit

    peak = merit.peak_flop_per_s(cluster.chips, cluster.chip, scenario.training.precision)
    mfu = merit.mfu(opslib.model_flops_per_step(scenario), peak, point_s) if point_s > 0 else None
    value = scenario_values(scenario, mfu)
    # off a profile's domain: its own rows'; else the shipped fit's, read once (each read a deep copy)
    dom = ev.domain if ev.domain is not None else fitted_read().get("domain", {})
    axes = extrapolated_rows(value, cluster.chip.name, dom)[0]
    low_s, high_s = widen(point_s, half_width(ev, axes, growth_log(value, cluster.chip.name, dom)),
                          fast_log, slow_log)
    return Interval(point_s=point_s, low_s=low_s, high_s=high_s, fit_log=ev.fit_log,
                    release_log=Z80 * ev.release_sigma, slow_log=slow_log, fast_log=fast_log,
                    swings=sorted(swings, key=lambda s: -s.swing_s), fit_label=ev.label, fit_source=ev.source,
                    release_label=ev.release_label, extrapolated=axes, mfu_best=mfu_best(cluster.chip.name, ev.domain),
                    anchored=anchored)


def weights_for(factors: tuple, cal: Calibration, profile, generation: str | None = None, *,
                times: StepTimes) -> tuple[np.ndarray, str]:
    """The draws' weights: by the published Trainium2 run under the shipped fit (`_weights`, its settings timed by
    `times`); uniform under a profile's evidence and on a generation no run measured (Trn3 is never more certain
    than what it borrows from)."""
    unmeasured = generation is not None and generation not in fitted_read().get("domain", {})
    return _uniform() if profile is not None or unmeasured else _weights(factors, cal, times)


def nan_keys() -> dict:
    """The interval keys of an infeasible run."""
    return {**{k: float("nan") for k in INTERVAL_KEYS}, "extrapolated": [], "mfu_implausible": False}
