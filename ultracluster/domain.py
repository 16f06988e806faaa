"""The calibrated domain: what the calibration rows span, per chip generation, and where a layout lies off it.

For each axis (tp, pp, cp, sequence length, model size, ZeRO stage, recomputation) whether the measured runs
cover it, the best MFU a published run of each chip generation reached, and the log half-width an extrapolated
axis adds to an interval (docs/uncertainty.md). One layout (`extrapolated`, a run's summary) or many at once
(`extrapolated_rows`, a plan's rows): the same comparison. `ultracluster.uncertainty` builds the interval on it.
"""
from __future__ import annotations

import math

import numpy as np

from .calibration.fitted_files import fitted_read


# The axes of the calibrated domain (calibration.json "domain", per chip generation): numeric ranges and sets;
# `cell` is the (training stack, pipelined or not) pair: what a stack's engine and defaults change
DOMAIN_RANGES = ("tp", "pp", "cp", "seq_len", "params_b")
DOMAIN_SETS = ("zero", "recompute", "cell")
# The axes that decide the compute model's error, checked against the rows of the layout's own chip generation
# only: tokens per NeuronCore (rank) per microbatch (micro_batch x seq_len / (tp x cp): how much work each kernel
# does) and MFU (the published rows' MFU against the layout's predicted one). Beyond the rows' range a layout is
# extrapolated on the axis and its interval widens by the growth of the group-out error along it that the
# calibration measured (calibration.json "axis_growth", `growth_log`), not by an assumed amount.
GENERATION_RANGES = ("tokens_per_core", "mfu")
# How far past the rows' MFU a layout's predicted MFU may lie and still count as inside: the fit's own miss on a
# fitted layout (every certain layout within 8 % in-sample, docs/calibration.md), so a row's own layout, predicted,
# is on the domain. Tokens per core are a layout's exact configuration: no slack.
SLACK = {"tokens_per_core": 1e-6, "mfu": 0.08}


def cell(stack, pp):
    """The (stack, pipelined or not) cell of a layout, e.g. "neuronx-distributed/pipeline"; arrays give an array."""
    if np.ndim(stack) == 0 and np.ndim(pp) == 0:
        return f"{stack}/{'pipeline' if int(pp) > 1 else 'no pipeline'}"
    s, p = np.broadcast_arrays(np.asarray(stack, dtype=object), np.asarray(pp))
    return np.where(p > 1, s + "/pipeline", s + "/no pipeline").astype(object)


def model_params_b(scenario) -> float:
    """The model's parameters in billions (dense and expert, embedding and head)."""
    from . import operators as opslib

    dense, expert = opslib.chunk_params_split(scenario.model, 1, np.array([float(scenario.model.layers)]), 1, 1)
    return float(dense.sum() + expert.sum()) / 1e9


def tokens_per_core(micro_batch, seq_len, tp, cp):
    """Tokens each rank (a logical NeuronCore) works on per microbatch: micro_batch x seq_len / (tp x cp)."""
    return np.asarray(micro_batch, dtype=float) * np.asarray(seq_len, dtype=float) / (
        np.asarray(tp, dtype=float) * np.asarray(cp, dtype=float))


def scenario_tokens_per_core(scenario) -> float:
    t, p = scenario.training, scenario.parallelism
    return float(tokens_per_core(t.micro_batch, t.seq_len, p.tp, p.cp))


def domain_of(items) -> dict:
    """The calibrated domain of measured runs, per chip generation: the ranges of tp, pp, cp, sequence length and
    model size (billions of parameters), of tokens per core per microbatch and MFU (GENERATION_RANGES), the ZeRO
    stages and recomputations, the best MFU, and the runs' names. `items`: (generation, scenario, mfu, name) of
    each run (calibration.json "domain"; a profile's own)."""
    out: dict[str, dict] = {}
    for gen, sc, mfu, name in items:
        d = out.setdefault(gen, {"tp": [], "pp": [], "cp": [], "seq_len": [], "params_b": [], "tokens_per_core": [],
                                 "mfu": [], "zero": [], "recompute": [], "cell": [], "mfu_best": 0.0, "layouts": []})
        for k, v in (("tp", sc.parallelism.tp), ("pp", sc.parallelism.pp), ("cp", sc.parallelism.cp),
                     ("seq_len", sc.training.seq_len), ("params_b", model_params_b(sc)),
                     ("tokens_per_core", scenario_tokens_per_core(sc)), ("mfu", round(float(mfu), 4))):
            d[k] = [min(d[k] + [v]), max(d[k] + [v])] if d[k] else [v, v]
        d["zero"] = sorted(set(d["zero"]) | {sc.training.zero})
        d["recompute"] = sorted(set(d["recompute"]) | {sc.training.recompute})
        d["cell"] = sorted(set(d["cell"]) | {cell(sc.stack, sc.parallelism.pp)})
        d["mfu_best"] = round(max(d["mfu_best"], mfu), 4)
        d["layouts"].append(name)
    return out


def extrapolated(scenario, generation: str, dom: dict | None = None, mfu: float | None = None) -> list[str]:
    """The axes on which `scenario` lies outside what the calibration rows span ("generation" when no row of
    its chip generation exists); empty inside the calibrated domain. `dom`: a calibration profile's domain
    (default: the shipped fit's); `mfu`: the layout's predicted MFU (None: the MFU axis is not checked)."""
    return extrapolated_rows(scenario_values(scenario, mfu), generation, dom)[0]


def scenario_values(scenario, mfu: float | None = None) -> dict:
    """A scenario's value on every domain axis (`extrapolated_rows`' `value`)."""
    return {"tp": scenario.parallelism.tp, "pp": scenario.parallelism.pp, "cp": scenario.parallelism.cp,
            "seq_len": scenario.training.seq_len, "params_b": model_params_b(scenario),
            "tokens_per_core": scenario_tokens_per_core(scenario), "mfu": np.nan if mfu is None else mfu,
            "zero": scenario.training.zero, "recompute": scenario.training.recompute,
            "cell": cell(scenario.stack, scenario.parallelism.pp)}


def _generation_distance(value: dict, generation: str, dom: dict | None) -> dict[str, np.ndarray]:
    """{axis: [n] |log| distance beyond the generation's rows' range on each GENERATION_RANGES axis} (0 inside it,
    where the value is unknown (NaN) or the domain predates the axis). A generation with no rows (Trainium3) is
    never nearer the evidence than a measured one: its distance is the largest against any generation's rows."""
    dom = fitted_read().get("domain", {}) if dom is None else dom
    if generation not in dom and dom:
        each = [_generation_distance(value, g, dom) for g in dom]
        return {k: np.max(np.stack([d[k] for d in each]), axis=0) for k in GENERATION_RANGES}
    n = max([np.size(v) for v in value.values()] + [1])
    g = dom.get(generation, {})
    out = {}
    for k in GENERATION_RANGES:
        x = np.broadcast_to(np.asarray(value.get(k, np.nan), dtype=float), (n,))
        span = g.get(k)
        if not span or not (span[0] > 0 and span[1] > 0):
            out[k] = np.zeros(n)
            continue
        hi, lo = span[1] * (1 + SLACK[k]), span[0] * (1 - SLACK[k])
        with np.errstate(divide="ignore", invalid="ignore"):
            beyond = np.where(x > hi, np.log(x / span[1]),
                              np.where(x < lo, np.log(span[0] / np.maximum(x, 1e-300)), 0.0))
        out[k] = np.where(np.isfinite(beyond), beyond, 0.0)
    return out


def axis_growth(axis: str) -> float:
    """The measured growth of the group-out |log error| per unit |log distance| beyond the rows along a
    GENERATION_RANGES axis (calibration.json "axis_growth"; 0 in a fit that did not measure it)."""
    return float(fitted_read().get("axis_growth", {}).get("growth_per_log", {}).get(axis, 0.0))


def growth_log(value: dict, generation: str, dom: dict | None = None):
    """Log half-width the GENERATION_RANGES axes add (in quadrature): on each, the measured growth (`axis_growth`)
    times how far beyond the generation's rows the layout lies (|log| of the ratio to the range's end). A number
    for scalar values, else an array [n]."""
    dist = _generation_distance(value, generation, dom)
    out = np.sqrt(sum((axis_growth(k) * dist[k]) ** 2 for k in GENERATION_RANGES))
    return float(out[0]) if all(np.ndim(v) == 0 for v in value.values()) else out


def extrapolated_rows(value: dict, generation: str, dom: dict | None = None) -> list[list[str]]:
    """`extrapolated` of many layouts of one chip generation at once: `value` maps each axis (tp, pp, cp, seq_len,
    params_b, zero, recompute) to a number or an array (one per layout); one list of axes per layout."""
    head, off = _off_domain(value, generation, dom)
    axes = DOMAIN_RANGES + DOMAIN_SETS
    dist = _generation_distance(value, generation, dom)
    # named where the generation has rows of its own (an unmeasured one says "generation"; it still widens)
    gen = np.stack([(dist[k] > 0) & (not head) for k in GENERATION_RANGES], axis=1)
    return [head + [k for k, o in zip(axes, row) if o] + [k for k, o in zip(GENERATION_RANGES, grow) if o]
            for row, grow in zip(off.tolist(), gen.tolist())]


def extrapolated_columns(value: dict, generation: str, dom: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`extrapolated_rows` as a plan's columns: each layout's axes comma-separated ("" inside the domain), and how
    many there are; each distinct set of axes is joined once."""
    head, off = _off_domain(value, generation, dom)
    dist = _generation_distance(value, generation, dom)
    # named where the generation has rows of its own (an unmeasured one says "generation"; it still widens)
    gen = np.stack([(dist[k] > 0) & (not head) for k in GENERATION_RANGES], axis=1)
    every = DOMAIN_RANGES + DOMAIN_SETS + GENERATION_RANGES
    code = np.concatenate([off, gen], axis=1).astype(np.int64) @ (1 << np.arange(len(every), dtype=np.int64))
    found, which = np.unique(code, return_inverse=True)
    text = np.array([",".join(head + [k for j, k in enumerate(every) if int(c) >> j & 1]) for c in found], dtype=object)
    axes = DOMAIN_RANGES + DOMAIN_SETS
    is_cell = off[:, axes.index("cell")]
    # in units of one axis's widening (`extrapolation_log`): an unseen cell weighs its group-out error; the
    # GENERATION_RANGES axes widen by their measured growth instead (`growth_log`), not counted here
    return text[which.reshape(-1)], len(head) + off.sum(axis=1) - is_cell + is_cell * _cell_weight()


def _off_domain(value: dict, generation: str, dom: dict | None) -> tuple[list[str], np.ndarray]:
    """(["generation"] when no row of the generation exists, else []; [layouts, DOMAIN_RANGES + DOMAIN_SETS] whether
    each layout lies outside what the rows span on each axis)."""
    dom = fitted_read().get("domain", {}) if dom is None else dom
    n = max([np.size(v) for v in value.values()] + [1])
    axes = DOMAIN_RANGES + DOMAIN_SETS
    if not dom:
        return [], np.zeros((n, len(axes)), dtype=bool)
    # the layout axes count as checked where a row of any generation spans them (the mechanisms they exercise
    # were checked there; what a newer chip changes is in its hardware factors); the generation by its own rows
    d = {k: [min(g[k][0] for g in dom.values()), max(g[k][1] for g in dom.values())] for k in DOMAIN_RANGES}
    d.update({k: sorted({v for g in dom.values() for v in g.get(k, ())}, key=str) for k in DOMAIN_SETS})
    off = {k: np.broadcast_to(~((d[k][0] * (1 - 1e-6) <= np.asarray(value[k], dtype=float))
                                & (np.asarray(value[k], dtype=float) <= d[k][1] * (1 + 1e-6))), (n,))
           for k in DOMAIN_RANGES}
    # a domain written before cells were recorded (an older profile) checks no cell
    off.update({k: np.broadcast_to(~np.isin(np.asarray(value[k], dtype=object), np.asarray(d[k], dtype=object))
                                   if d[k] and k in value else np.zeros(n, dtype=bool), (n,))
                for k in DOMAIN_SETS})
    return ["generation"] if generation not in dom else [], np.stack([off[k] for k in axes], axis=1)


def mfu_best(generation: str, dom: dict | None = None) -> float | None:
    """The best MFU any published run of the generation reached, or a profile's run where that is higher (None:
    no run of it)."""
    best = [float(d[generation]["mfu_best"]) for d in (fitted_read().get("domain", {}), dom or {}) if generation in d]
    return max(best) if best else None


def _out_errors() -> tuple[float, float]:
    """(worst leave-one-layout-out |error|, worst cell-out |error|) of the shipped fit, in %, from one read of
    calibration.json (the cell figure falls back to the layout one in a fit without group-out)."""
    doc = fitted_read()
    layout = doc.get("cross_validation", {}).get("worst_abs_error_pct", 0.0)
    return layout, doc.get("group_out", {}).get("cells", {}).get("worst_abs_error_pct", layout)


def cell_out_pct() -> float:
    """The worst error of the shipped fit on a (stack, pipelined or not) cell it had not seen: every row of the
    cell left out at once (calibration.json "group_out", docs/calibration.md)."""
    return _out_errors()[1]


def _cell_weight() -> float:
    """An unseen cell's widening in units of one other axis's (squared: the count `extrapolation_log` takes)."""
    a, c = (math.log1p(x / 100) for x in _out_errors())
    return (c / a) ** 2 if a > 0 else 1.0


def extrapolation_log(axes, worst_pct: float | None = None):
    """Log half-width the extrapolated axes add, in quadrature: each axis the worst leave-one-layout-out error of
    the fit, what the model missed by on a layout it had not seen (`worst_pct` a profile's), and an unseen
    (stack, pipelined or not) cell the worst error with every row of a cell left out (`cell_out_pct`)
    (docs/uncertainty.md). `axes`: the list of axes, or (for many layouts) an array of their weighted counts
    (`extrapolated_columns`: a cell counts as its group-out error in units of the layout-out one)."""
    layout, cell_pct = _out_errors()
    a = math.log1p((layout if worst_pct is None else worst_pct) / 100)
    if isinstance(axes, list):
        axes = [k for k in axes if k not in GENERATION_RANGES]     # those widen by their growth (`growth_log`)
        c = math.log1p(cell_pct / 100) if "cell" in axes else 0.0
        return math.sqrt((len(axes) - ("cell" in axes)) * a * a + c * c)
    return np.sqrt(np.asarray(axes, dtype=float)) * a


def mfu_implausible(mfu, best: float | None):
    """Whether a predicted MFU is above the best any published run of the chip generation reached (`mfu_best`):
    not evidence-backed. A number or an array; False where either is unknown."""
    m = np.asarray(mfu, dtype=float)
    out = np.isfinite(m) & (m > (np.inf if best is None else best))
    return out if np.ndim(mfu) else bool(out)
