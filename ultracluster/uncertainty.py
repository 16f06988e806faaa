"""Every prediction with its interval: what the fit, the Neuron releases and the unmeasured hardware leave open.

A step time carries three kinds of uncertainty (docs/uncertainty.md):

- the fit: how far the model misses a layout it was not fitted to, the leave-one-layout-out residuals of
  `scripts/calibrate.py` (their 80th percentile, in log space);
- the software: the same layout moved 10-20 % between Neuron releases, the between-release spread of
  `data/calibration/training.csv` (a standard deviation in log space, scaled to the 80 % two-sided quantile
  of a normal, 1.2816);
- the hardware: factors no published measurement pins down (`ultracluster.cluster.factor_ranges.FACTORS`, for
  Trn2, Trn3 and the Trn1 NeuronLink rate), each over its argued range. They are propagated through the model
  as a distribution: every factor uniform over its range and independent, DRAWS settings of all of them, each
  weighted by how well it reproduces the published Trainium2 run (`anchor`); the weighted 10th and 90th
  percentiles of the step are the hardware part. Chip factors fitted on Trn1 (TensorE efficiency, the in-graph
  synchronisation) are also open on newer chips.

The fit and release parts combine in quadrature into one log half-width h; the hardware part adds in quadrature
to each side: low = t exp(-sqrt(h^2 + d_fast^2)), high = t exp(sqrt(h^2 + d_slow^2)). The point estimate is
always inside, and a chip with fewer measurements gets a wider interval.

Pricing is vectorized: every factor setting is a row of one table priced by the planner's fast path, the
replay's model over a row axis (`step_times`): two evaluations per interval (each factor's grid, then the
settings beside the band's ends), in this process, no Ray, no files.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace, field
from functools import lru_cache

import numpy as np

from .cluster.calibration import FITTED, TRN1, TRN2, Calibration, fitted, load_fitted
from .cluster.factor_ranges import UncertainFactor, for_generation

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
    dom = _fitted().get("domain", {}) if dom is None else dom
    if not dom:
        return []
    # the layout axes count as checked where a row of any generation spans them (the mechanisms they exercise
    # were checked there; what a newer chip changes is in its hardware factors); the generation by its own rows
    d = {k: [min(g[k][0] for g in dom.values()), max(g[k][1] for g in dom.values())] for k in DOMAIN_RANGES}
    d.update({k: sorted({v for g in dom.values() for v in g[k]}, key=str) for k in DOMAIN_SETS})
    value = {"tp": scenario.parallelism.tp, "pp": scenario.parallelism.pp, "cp": scenario.parallelism.cp,
             "seq_len": scenario.training.seq_len, "params_b": model_params_b(scenario),
             "zero": scenario.training.zero, "recompute": scenario.training.recompute}
    out = ["generation"] if generation not in dom else []
    out += [k for k in DOMAIN_RANGES if not d[k][0] * (1 - 1e-6) <= value[k] <= d[k][1] * (1 + 1e-6)]
    return out + [k for k in DOMAIN_SETS if value[k] not in d[k]]


def mfu_best(generation: str, dom: dict | None = None) -> float | None:
    """The best MFU any published run of the generation reached, or a profile's run where that is higher (None:
    no run of it)."""
    best = [float(d[generation]["mfu_best"]) for d in (_fitted().get("domain", {}), dom or {}) if generation in d]
    return max(best) if best else None


def extrapolation_log(axes: list[str], worst_pct: float | None = None) -> float:
    """Log half-width each extrapolated axis adds, in quadrature: the worst leave-one-layout-out error of the
    fit, what the model missed by on a layout it had not seen (docs/uncertainty.md); `worst_pct` a profile's."""
    worst = _fitted().get("cross_validation", {}).get("worst_abs_error_pct", 0.0) if worst_pct is None else worst_pct
    return math.sqrt(len(axes)) * math.log1p(worst / 100)


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

    from .layouts.fast import evaluate
    from .layouts.pricer import Pricer
    from .layouts.space import _own_row

    row = _own_row(one)
    table = pd.DataFrame([{**row, "cal": i} for i in range(len(calibrations))])
    out = evaluate(Pricer(one, calibrations=tuple(calibrations), shared_last_sends=True), table)
    return np.where(out["feasible"].to_numpy(), out["step_time_s"].to_numpy(dtype=float), np.nan)


def _replayed(one, cal: Calibration) -> float:
    """One replayed step (`emulate` with in-process shards): no Ray, no files."""
    from .actors.local import local_shards
    from .emulate import emulate

    res = emulate(one, local_shards, None, cal)
    return float(res.steps[-1].step_time_s) if res.feasible and res.steps else float("nan")


# The hardware part is read from DRAWS quasi-random settings of the factors (a Halton sequence: the same draws
# in every run), each factor uniform over its range, independent; the step at a setting is the sum of each
# factor's own effect, priced exactly at GRID points of its range (the ends, its central value and the two
# midpoints) and interpolated: 1 + 4 n pricings for n factors (the central point is the base);
# tests/chip/test_uncertainty.py checks it against pricing every draw.
DRAWS = 4096
GRID = 5


def halton(n: int, d: int) -> np.ndarray:
    """The first n points of the d-dimensional Halton sequence in [0, 1)^d (bases: the first d primes)."""
    primes = [p for p in range(2, 200) if all(p % q for q in range(2, int(p ** 0.5) + 1))][:d]
    out = np.zeros((n, d))
    for j, b in enumerate(primes):
        k, f = np.arange(1, n + 1), 1.0
        while k.any():
            f /= b
            out[:, j] += f * (k % b)
            k //= b
    return out


def _grid(f: UncertainFactor, central: float) -> np.ndarray:
    """Where a factor's own effect is priced: its ends, its central value and the two midpoints."""
    return np.array([f.low, 0.5 * (f.low + central), central, 0.5 * (central + f.high), f.high])


def _responses(scenario, cal: Calibration, factors: tuple) -> tuple[float, np.ndarray]:
    """The step at the central setting and at each factor's GRID points (the others central): (base, [n, GRID]);
    the central point is the base, priced once."""
    rows = [cal] + [cal.with_(**{f.name: float(v)}) for f in factors
                    for j, v in enumerate(_grid(f, factor_value(cal, f.name))) if j != GRID // 2]
    t = step_times(scenario, rows)
    return float(t[0]), np.insert(t[1:].reshape(len(factors), GRID - 1), GRID // 2, t[0], axis=1)


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
    t2 = _fitted().get("trn2") or {}
    if "scenario" not in t2:
        return None
    return t2["row"], _anchor_scenario(t2["row"]), float(t2["published_step_s"])


@lru_cache(maxsize=1)
def _anchor_scenario(row: str):
    from .scenario import load_scenario

    return load_scenario(_fitted()["trn2"]["scenario"])


@lru_cache(maxsize=16)
def _weights(factors: tuple, cal: Calibration) -> tuple[np.ndarray, str]:
    """How well each draw reproduces the anchor run: a normal likelihood of its log error with the fit's and the
    releases' 80 % half-width as the 80 % band (uniform when no factor moves the anchor). Cached: the same for
    every run of a chip generation under one calibration."""
    a = anchor()
    if a is None:
        return np.full(DRAWS, 1.0 / DRAWS), ""
    row, sc, published = a
    base, grid_times = _responses(_one_step(sc), cal, factors)
    if not math.isfinite(base) or np.allclose(grid_times, base, rtol=1e-9, equal_nan=True):
        return np.full(DRAWS, 1.0 / DRAWS), ""
    err = math.log(base / published) + _draws(factors, cal, base, grid_times)
    w = np.exp(-0.5 * (err * Z80 / evidence().half_width_log) ** 2)
    return w / w.sum(), row


def weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    order = np.argsort(x)
    return float(x[order][min(np.searchsorted(np.cumsum(w[order]), q), x.size - 1)])


NEAR = 8        # draws priced exactly beside each quantile of the interpolated steps


def _exact_quantiles(scenario, cal: Calibration, factors: tuple, base: float, x: np.ndarray,
                     w: np.ndarray) -> tuple[float, float]:
    """The weighted 10th and 90th percentiles of log(step / base), each corrected by the median error of the
    interpolation at the NEAR draws closest to it (priced exactly: the factors' joint effects, which the
    per-factor grids miss, are largest where the band ends)."""
    u = halton(DRAWS, len(factors))
    qs = [weighted_quantile(x, w, q) for q in (0.1, 0.9)]
    if len(factors) == 1:             # one factor: the grid is its whole effect
        return qs[0], qs[1]
    near = [np.argsort(np.abs(x - q) - 1e9 * (w > 0.1 / DRAWS))[:NEAR] for q in qs]   # plausible draws first
    rows = [cal.with_(**{f.name: float(f.low + u[i, k] * (f.high - f.low)) for k, f in enumerate(factors)})
            for idx in near for i in idx]
    exact = np.log(step_times(_one_step(scenario), rows) / base).reshape(2, -1)
    return tuple(q + float(np.nanmedian(e - x[idx])) for q, e, idx in zip(qs, exact, near))


def interval(scenario, point_s: float, calibration: Calibration | None = None,
             evidence_: Evidence | None = None) -> Interval:
    """The 80 % interval of `scenario`'s step time around its replayed `point_s`.

    The hardware part is the 10th and 90th percentiles of the step over the factors' ranges (DRAWS settings),
    each setting weighted by how well it reproduces the published Trainium2 run (`anchor`; the shipped fit
    only, not a calibration profile's), so a setting that run rules out does not widen the band.

    Args:
        scenario: a resolved Scenario.
        point_s: the step time the run measured (the interval is scaled around it).
        calibration: the calibration the run used (default: the fitted one).
        evidence_: the fit and release parts (default: the committed calibration's; the calibration script's
            coverage check passes each fold's own).
    """
    from .cluster import build_cluster
    from .cluster.profile import calibration_for

    cal = calibration_for(scenario, calibration)      # the scenario's calibration profile, else the fit
    cluster = build_cluster(scenario, 1, cal)
    profile = profile_evidence(scenario)
    ev = evidence_ or profile or evidence()
    factors = tuple(factors_for(cluster, pinned=False, ranges=ev.ranges))
    swings, slow_log, fast_log, anchored = [], 0.0, 0.0, ""
    if factors:
        base, grid_times = _responses(_one_step(scenario), cal, factors)
        if math.isfinite(base) and base > 0:
            scale = point_s / base                        # around the replayed point
            for k, f in enumerate(factors):
                swings.append(FactorSwing(f, factor_value(cal, f.name), float(grid_times[k, 0]) * scale,
                                          float(grid_times[k, -1]) * scale, f.why))
            w, anchored = _weights(factors, cal) if profile is None else (np.full(DRAWS, 1.0 / DRAWS), "")
            x = _draws(factors, cal, base, grid_times)
            q10, q90 = _exact_quantiles(scenario, cal, factors, base, x, w)
            slow_log, fast_log = max(0.0, q90), max(0.0, -q10)
    axes = extrapolated(scenario, cluster.chip.name, ev.domain)        # off a profile's domain: its own rows'
    h = math.hypot(ev.half_width_log, extrapolation_log(axes, ev.worst_pct))
    return Interval(point_s=point_s, low_s=point_s * math.exp(-math.hypot(h, fast_log)),
                    high_s=point_s * math.exp(math.hypot(h, slow_log)), fit_log=ev.fit_log,
                    release_log=Z80 * ev.release_sigma, slow_log=slow_log, fast_log=fast_log,
                    swings=sorted(swings, key=lambda s: -s.swing_s), fit_label=ev.label, fit_source=ev.source,
                    release_label=ev.release_label, extrapolated=axes, mfu_best=mfu_best(cluster.chip.name, ev.domain),
                    anchored=anchored)


def nan_keys() -> dict:
    """The interval keys of an infeasible run."""
    return {**{k: float("nan") for k in INTERVAL_KEYS}, "extrapolated": [], "mfu_implausible": False}
