"""The user's fit: measured rows → the free factors they identify, regularised toward the shipped fit.

What is fitted (docs/calibration.md, "Your own cluster"):

- **Terms.** Rows naming the same scenario file are one term: the median of their throughputs (1 / step time;
  for `seq_per_s` rows the median seq/s, as the shipped fit takes its layouts' medians). Two rows sharing a
  `pair` label are one more term: the ratio of their per-instance throughputs, and pairs of the same two
  scenarios share one term, the median of their ratios (the shipped fit's same-release pairs).
- **Loss.** sum over terms of log(predicted / measured)^2 + PENALTY x sum over the fitted factors of
  log(factor / shipped value)^2: a factor moved by a factor of two costs as much as a 5 % miss on one term, so a
  few rows cannot drive a factor to a bound, and where the rows agree with the shipped fit nothing moves.
- **Which factors.** Only those the terms identify, decided on the Jacobian of the terms' log errors in the
  factors' logs at the shipped values: candidates in the order of `PRIORITY` for the rows' chip generations; a
  candidate is fitted when some term moves by at least MIN_SENSITIVITY of its relative change, at least
  MIN_INDEPENDENT of its column is not explained by the factors already taken (else the rows cannot tell it from
  them), and there are more terms than factors taken so far. The others stay at the shipped fit, with the reason.
- **Search.** Gauss-Newton in the factors' logs with a forward-difference Jacobian, step halving and the
  factors' physical bounds, from the shipped values. Every trial setting of every problem (the fit and each
  leave-one-out fold) that needs a scenario is timed in one vectorized call (`layouts.setting_times.setting_step_times`, the
  planner's fast path over a row axis of calibrations), each setting once (cached). The fast path leaves the
  replay's per-rank jitter out of pipelines (a few 0.1 %); each scenario's replay/fast-path ratio at the
  shipped values (one replay, `runner.predict`) corrects it, and the reported predictions are replays.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from ..calibration.factors import TRN1, TRN2, TRN3, Calibration
from ..calibration.profile import FACTOR_BOUNDS
from ..calibration.fitted_files import fitted, fitted_read

# The factors a profile may fit: name → (lower, upper) physical bound (`calibration.profile.FACTOR_BOUNDS`,
# which reading a profile checks too: the shipped fit's search bounds, a zero lower bound moved to a positive one)
CANDIDATES = {k: (lo, hi) for k, (lo, hi, _) in FACTOR_BOUNDS.items()}
# The training stacks' engine costs (ultracluster/stacks.py): a row moves only the engine of its own stack, and
# first, where it has a pipeline (six or four graph executions per microbatch and stage); the shipped fit may leave
# one at its lower bound, or unidentified down to it, which is no prior (`no_prior`): its sensitivity is probed at
# ENGINE_PROBE_S (5 ms: a PP4 run of 32 microbatches then spends about a tenth of its step in graph executions) and
# it is fitted from there without the pull toward the shipped value
ENGINES = ("graph_s_nxd", "graph_s_nemo")
ENGINE_PROBE_S = 5e-3
# Which factors each chip generation's rows try first: on Trn1 the TensorE efficiency then the in-graph
# collective cost (the shipped fit's order); on Trn2 the Trn2 scale of that cost (the factor the one published Trn2
# run fits) then the efficiency; Trn3 borrows both
PRIORITY = {TRN1: ("tensor_efficiency", "in_graph_sync_s"),
            TRN2: ("in_graph_sync_scale_trn2", "tensor_efficiency"),
            TRN3: ("tensor_efficiency", "in_graph_sync_scale_trn2")}
# why a factor is not even a candidate for the rows' generations
NOT_IN_ORDER = {"graph_s_nxd": "no row of a NeuronX Distributed pipeline (the engine it prices)",
                "graph_s_nemo": "no row of a NeMo or Megatron-LM pipeline (the engine it prices)",
                "in_graph_sync_scale_trn2": "no Trainium2 or Trainium3 row",
                "in_graph_sync_s": "no Trainium (trn1) row: on Trainium2 and 3 it acts only through its product with "
                                   "in_graph_sync_scale_trn2, which those rows fit instead"}
PENALTY = (0.05 / math.log(2)) ** 2     # a factor x2 away from the shipped fit weighs like a 5 % miss on one term
MIN_SENSITIVITY = 0.05                  # d log(step) / d log(factor) of at least one term
MIN_INDEPENDENT = 0.3                   # share of a factor's column not explained by the factors already taken
STEP = 1e-3                             # forward-difference step of the Jacobian, in log(factor)
MAX_ITERATIONS = 25
TOLERANCE = 1e-4                        # a Gauss-Newton step below this (in log factor; the factors are rounded to
                                        # 3 significant digits, 5e-4) ends the search
HALVINGS = 4
SHIPPED_WEIGHT = 2.0                    # the shipped fit's evidence counts as this many of the profile's terms


@dataclass(frozen=True)
class Term:
    """One fitted quantity: a scenario's median throughput (`groups` one key) or a pair ratio (two: small, large)."""

    kind: str                       # "median" or "scaling"
    rows_by_scenario: tuple[str, ...]
    log_target: float               # log of the measured median throughput (1/s) or median ratio
    rows: tuple[int, ...]           # row numbers it is made of


@dataclass
class ScenarioRows:
    """The rows of one scenario file."""

    key: str
    scenario: object                # the one-step scenario timed (layouts.setting_times.one_step)
    rows: list
    generation: str
    batch: float                    # global batch (seq per step), for pair ratios in seq/s
    instances: int


def shipped_factors(base: Calibration | None = None) -> dict[str, float]:
    base = base or fitted()
    # a factor below its candidate bound (an engine cost the calibration leaves at 0) starts at the bound: logs
    return {k: max(float(getattr(base.network, k) if hasattr(base.network, k) else getattr(base, k)), CANDIDATES[k][0])
            for k in CANDIDATES}


def _round(v: float) -> float:
    return float(f"{v:.3g}")


def terms_of(rows_by_scenario: dict[str, ScenarioRows]) -> list[Term]:
    """The median terms (one per scenario with rows outside pairs) and the pair terms, in the rows' order."""
    out = []
    for key, g in rows_by_scenario.items():
        direct = [r for r in g.rows if not r.pair]
        if direct:
            out.append(Term("median", (key,), math.log(statistics.median(r.throughput for r in direct)),
                            tuple(r.number for r in direct)))
    pairs: dict[str, list] = {}
    for g in rows_by_scenario.values():
        for r in g.rows:
            if r.pair:
                pairs.setdefault(r.pair, []).append((g, r))
    by_scenarios: dict[tuple[str, str], list[tuple[float, tuple[int, int]]]] = {}
    for label, members in pairs.items():
        (gs, rs), (gl, rl) = sorted(members, key=lambda m: (m[0].instances, m[1].number))
        ratio = (gl.batch * rl.throughput / gl.instances) / (gs.batch * rs.throughput / gs.instances)
        by_scenarios.setdefault((gs.key, gl.key), []).append((ratio, (rs.number, rl.number)))
    for (small, large), ratios in by_scenarios.items():
        out.append(Term("scaling", (small, large), math.log(statistics.median(x for x, _ in ratios)),
                        tuple(n for _, ns in ratios for n in ns)))
    return out


def residuals(terms: list[Term], rows_by_scenario: dict[str, ScenarioRows], log_step: dict[str, float]) -> np.ndarray:
    """log(predicted / measured) of each term, from each scenario's log step time."""
    out = []
    for t in terms:
        if t.kind == "median":
            out.append(-log_step[t.rows_by_scenario[0]] - t.log_target)
        else:
            gs, gl = rows_by_scenario[t.rows_by_scenario[0]], rows_by_scenario[t.rows_by_scenario[1]]
            pred = (math.log(gl.batch / gl.instances) - log_step[gl.key]) - (math.log(gs.batch / gs.instances)
                                                                              - log_step[gs.key])
            out.append(pred - t.log_target)
    return np.array(out, dtype=float)


class Timing:
    """Log step times of each scenario under factor settings, every request of a round timed in one vectorized call
    per scenario and each setting once; corrected by each scenario's replay/fast-path ratio at the shipped values."""

    def __init__(self, rows_by_scenario: dict[str, ScenarioRows], base: Calibration, correction: dict[str, float]):
        self.rows_by_scenario, self.base, self.correction = rows_by_scenario, base, correction
        self.cache: dict[tuple[str, tuple], float] = {}
        self.calls = 0
        self.settings = 0

    @staticmethod
    def key(factors: dict[str, float]) -> tuple:
        """The setting's identity: values to 12 significant digits (exp(log(x)) is x again, for the cache)."""
        return tuple(sorted((k, float(f"{v:.12g}")) for k, v in factors.items()))

    def time_settings(self, requests: dict[str, list[dict[str, float]]]) -> None:
        from ..layouts.setting_times import setting_step_times

        for g, settings in requests.items():
            todo = list(dict.fromkeys(self.key(s) for s in settings if (g, self.key(s)) not in self.cache))
            if not todo:
                continue
            times = setting_step_times(self.rows_by_scenario[g].scenario, [self.base.with_(**dict(k)) for k in todo])
            self.calls += 1
            self.settings += len(todo)
            for k, t in zip(todo, times):
                self.cache[(g, k)] = math.log(t) + self.correction[g] if t > 0 and math.isfinite(t) else math.nan

    def log_step(self, g: str, factors: dict[str, float]) -> float:
        return self.cache[(g, self.key(factors))]


@dataclass
class Problem:
    """One fit: its terms, the factors it frees, and (once solved) the factors and the last Jacobian."""

    terms: list[Term]
    free: list[str]
    start: dict[str, float]                  # every candidate's value; the free ones move
    predict: tuple[str, ...] = ()            # scenarios to time at the solution (a fold's left-out one)
    factors: dict[str, float] = field(default_factory=dict)
    jacobian: np.ndarray | None = None
    residuals: np.ndarray | None = None
    predicted: dict[str, float] = field(default_factory=dict)   # log step of `predict` at the solution
    iterations: int = 0


def no_prior(k: str, shipped: dict[str, float]) -> bool:
    """Whether the shipped fit gives factor `k` no value to pull toward: a stack's engine cost that it left at its
    lower bound, or whose identifiable range reaches that bound (calibration.json `identifiability`: the public rows
    cannot tell it from nothing)."""
    if k not in ENGINES:
        return False
    low = fitted_read().get("identifiability", {}).get(k, {}).get("low", math.inf)
    return min(shipped[k], low) <= CANDIDATES[k][0] * 1.001


def penalties(names, shipped: dict[str, float] | None = None) -> np.ndarray:
    """The pull toward the shipped fit of each named factor: none where the shipped fit gives no value to pull
    toward (`no_prior`)."""
    shipped = shipped if shipped is not None else shipped_factors()
    return np.array([0.0 if no_prior(k, shipped) else PENALTY for k in names])


def engine_order(rows_by_scenario: dict[str, ScenarioRows], terms: list[Term]) -> list[str]:
    """The engine costs the terms' pipelined scenarios see, in the order their stacks first appear."""
    from ..stacks import STACKS

    out = []
    for t in terms:
        for g in t.rows_by_scenario:
            sc = rows_by_scenario[g].scenario
            k = STACKS[sc.stack].engine.graph_factor
            if sc.parallelism.pp > 1 and k in ENGINES and k not in out:
                out.append(k)
    return out


def _point(prob: Problem, u: np.ndarray) -> dict[str, float]:
    return {**prob.start, **{k: float(math.exp(x)) for k, x in zip(prob.free, u)}}


def _solver(prob: Problem, rows_by_scenario: dict[str, ScenarioRows], timing: Timing, shipped: dict[str, float]):
    """A generator: yields the settings it needs timed ({scenario: [factors, ...]}), gets None back once they are
    in `timing`; ends with `prob` solved."""
    used = sorted({g for t in prob.terms for g in t.rows_by_scenario})
    lo = np.array([math.log(CANDIDATES[k][0]) for k in prob.free])
    hi = np.array([math.log(CANDIDATES[k][1]) for k in prob.free])
    u0 = np.array([math.log(shipped[k]) for k in prob.free])
    # an engine cost without a prior starts where its effect shows (near its lower bound its Jacobian is all but nil
    # and no step moves it)
    u = np.clip(np.array([math.log(max(prob.start[k], ENGINE_PROBE_S) if no_prior(k, shipped) else prob.start[k])
                          for k in prob.free]), lo, hi)
    pen = penalties(prob.free, shipped)

    def settings(u: np.ndarray) -> list[dict[str, float]]:
        out = [_point(prob, u)]
        for j in range(len(prob.free)):
            e = u.copy()
            e[j] += STEP if e[j] + STEP <= hi[j] else -STEP
            out.append(_point(prob, e))
        return out

    def evaluate(u: np.ndarray):
        pts = settings(u)
        logs = [{g: timing.log_step(g, p) for g in used} for p in pts]
        r = residuals(prob.terms, rows_by_scenario, logs[0])
        jac = np.zeros((len(prob.terms), len(prob.free)))
        for j in range(len(prob.free)):
            h = (math.log(pts[1 + j][prob.free[j]]) - u[j])
            jac[:, j] = (residuals(prob.terms, rows_by_scenario, logs[1 + j]) - r) / h
        loss = float(r @ r + np.sum(pen * (u - u0) ** 2))
        return r, jac, loss

    if prob.free and prob.terms:
        yield {g: settings(u) for g in used}
        r, jac, loss = evaluate(u)
        for it in range(MAX_ITERATIONS):
            prob.iterations = it + 1
            grad = jac.T @ r + pen * (u - u0)
            step = np.linalg.solve(jac.T @ jac + np.diag(np.maximum(pen, 1e-9)), -grad)
            if float(np.max(np.abs(np.clip(u + step, lo, hi) - u))) < TOLERANCE:
                break                               # converged: a smaller step than the factors' rounding sees
            for _ in range(HALVINGS):               # halve the step until the loss does not grow
                trial = np.clip(u + step, lo, hi)
                yield {g: settings(trial) for g in used}
                r2, jac2, loss2 = evaluate(trial)
                if math.isfinite(loss2) and loss2 <= loss:
                    u, r, jac, loss = trial, r2, jac2, loss2
                    break
                step = step / 2
            else:
                break
        prob.jacobian, prob.residuals = jac, r
    prob.factors = {**prob.start, **{k: _round(math.exp(x)) for k, x in zip(prob.free, u)}}
    if prob.predict:
        yield {g: [prob.factors] for g in prob.predict}
        prob.predicted = {g: timing.log_step(g, prob.factors) for g in prob.predict}
    return prob


def solve_all(problems: list[Problem], rows_by_scenario: dict[str, ScenarioRows], timing: Timing,
              shipped: dict[str, float]) -> list[Problem]:
    """Solve every problem at once: each round times what all unfinished problems asked for, together."""
    running = [_solver(p, rows_by_scenario, timing, shipped) for p in problems]
    asks = {}
    for i, gen in enumerate(running):
        try:
            asks[i] = next(gen)
        except StopIteration:
            pass
    while asks:
        merged: dict[str, list] = {}
        for req in asks.values():
            for g, pts in req.items():
                merged.setdefault(g, []).extend(pts)
        timing.time_settings(merged)
        for i in list(asks):
            try:
                asks[i] = running[i].send(None)
            except StopIteration:
                del asks[i]
    return problems


def jacobian_at(point: dict[str, float], rows_by_scenario: dict[str, ScenarioRows], terms: list[Term], timing: Timing,
                names: list[str]) -> np.ndarray:
    """d(term log error) / d log(factor) of every candidate in `names` at `point` (forward differences)."""
    used = sorted({g for t in terms for g in t.rows_by_scenario})
    # an engine cost near its lower bound is probed at ENGINE_PROBE_S (its effect at 10 us says nothing)
    at = {k: ({**point, k: ENGINE_PROBE_S} if k in ENGINES and point[k] < ENGINE_PROBE_S else point) for k in names}
    pts = [point] + [a for k in names for a in (at[k], {**at[k], k: math.exp(math.log(at[k][k]) + STEP)})]
    timing.time_settings({g: pts for g in used})

    def res(p):
        return residuals(terms, rows_by_scenario, {g: timing.log_step(g, p) for g in used})
    cols = [(res(pts[2 + 2 * j]) - res(pts[1 + 2 * j])) / STEP for j in range(len(names))]
    return np.column_stack(cols) if cols else np.zeros((len(terms), 0))


def identify(terms: list[Term], rows_by_scenario: dict[str, ScenarioRows], jac: np.ndarray, names: list[str]) -> tuple[list[str], dict]:
    """The factors the terms identify (in priority order) and, for each other candidate, why it stays shipped.

    `jac`: d(term log error) / d log(factor) at the shipped values, one column per name of `names`."""
    gens = {}
    for t in terms:
        for g in t.rows_by_scenario:
            gens[rows_by_scenario[g].generation] = gens.get(rows_by_scenario[g].generation, 0) + 1
    order = [k for k in engine_order(rows_by_scenario, terms) if k in names]
    for gen in sorted(gens, key=lambda x: -gens[x]):
        order += [k for k in PRIORITY.get(gen, ()) if k not in order]
    chosen: list[str] = []
    kept: dict[str, str] = {}
    for k in names:
        if k not in order:
            kept[k] = NOT_IN_ORDER.get(k, "no row on a chip it acts on")
    for k in order:
        col = jac[:, names.index(k)] if terms else np.zeros(0)
        if len(chosen) >= len(terms):
            kept[k] = (f"{len(terms)} measured term(s) identify at most {len(terms)} factor(s): "
                       f"{', '.join(chosen) or 'none'} first")
            continue
        sens = float(np.max(np.abs(col))) if col.size else 0.0
        if sens < MIN_SENSITIVITY:
            kept[k] = (f"no row depends on it enough (at most {sens:.3f} % of the step per 1 % of the factor; "
                       f"needs {MIN_SENSITIVITY})")
            continue
        if chosen:
            a = jac[:, [names.index(c) for c in chosen]]
            coef, *_ = np.linalg.lstsq(a, col, rcond=None)
            rest = float(np.linalg.norm(col - a @ coef))
            if rest < MIN_INDEPENDENT * float(np.linalg.norm(col)):
                kept[k] = (f"the rows cannot tell it from {', '.join(chosen)} (only {100 * rest / np.linalg.norm(col):.0f} "
                           f"% of its effect is its own; needs {100 * MIN_INDEPENDENT:.0f} %)")
                continue
        chosen.append(k)
    return chosen, kept


def fold_factors(main: Problem, jac_all: np.ndarray, keep: list[int], free: list[str], names: list[str],
                 shipped: dict[str, float]) -> dict[str, float]:
    """A leave-one-out fold's factors without a refit: the Gauss-Newton step from the full fit's solution with only
    the fold's terms (`keep`, indices into the full fit's terms) and the fold's free factors (the others back at the
    shipped fit), on the Jacobian at the solution (`jac_all`: one column per name). The model is close to linear in
    the factors' logs around the fit, so this is the fold's refit to well within the rounding of its factors."""
    u_star = np.array([math.log(main.factors[k]) for k in names])
    u0 = np.array([math.log(shipped[k]) for k in names])
    fixed = [i for i, k in enumerate(names) if k not in free]
    mov = [names.index(k) for k in free]
    d = np.zeros(len(names))
    d[fixed] = u0[fixed] - u_star[fixed]
    r = main.residuals[keep] + jac_all[keep][:, fixed] @ d[fixed]
    if mov:
        a = jac_all[keep][:, mov]
        pen = penalties([names[i] for i in mov], shipped)
        rhs = -(a.T @ r + pen * (u_star[mov] - u0[mov]))
        d[mov] = np.linalg.solve(a.T @ a + np.diag(np.maximum(pen, 1e-9)), rhs)
    out = {}
    for i, k in enumerate(names):
        lo, hi = CANDIDATES[k]
        out[k] = _round(min(max(math.exp(u_star[i] + d[i]), lo), hi)) if k in free else shipped[k]
    return out


def weighted_quantile(values: list[float], weights: list[float], q: float) -> float:
    """The q-quantile of weighted values (linear between the weights' midpoints)."""
    if not values:
        return 0.0
    order = np.argsort(values)
    v = np.asarray(values, dtype=float)[order]
    w = np.asarray(weights, dtype=float)[order]
    mid = (np.cumsum(w) - w / 2) / w.sum()
    return float(np.interp(q, mid, v))
