"""Scenario + search options → every valid layout, one row per layout (the plan's layout axis).

The scenario fixes the model and the job (sequence length, global batch, precision, master weights); the
search varies, for each instance type and count: lnc (where the instance type has more than one), tp, cp,
pp, ep (mixture of experts only), micro_batch, recompute, the ZeRO stage, the pipeline schedule and its
virtual stages; dp is derived. A layout is generated only when the scenario's cross-field rules
(`scenario.checks`) hold for it, by construction: tp divides the heads and divides or is divided by the KV
heads, sequence parallelism (on whenever tp > 1) needs tp to divide the sequence, cp divides it, tp x cp x pp
divides the ranks, pp is at most the layers (pp x virtual stages for interleaving), global_batch divides by
dp x micro_batch, ep divides dp and the experts; and interleaving needs microbatches that fill its groups of pp
(Megatron-LM's rule: microbatches a multiple of pp). The scenario's own layout is always a candidate.
tests/plan/test_space.py loads generated layouts through `load_scenario`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from .. import stacks as stk
from ..cluster import group_ranks
from ..cluster.catalog import INSTANCES, ranks_per_instance, ultraserver_of
from ..errors import Problem, ScenarioError
from ..scenario.schema import PRICE_RANGE, PRICE_WHY
from ..scenario import Scenario
from ..step.counts import data_parallel, microbatches, sequence_parallel_default, ultraserver_default
from .steps import LAYOUT_COLUMNS

RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class SearchSpace:
    """What the planner varies. Tuples list the values tried; None: derived from the scenario.

    Attributes:
        instance_types: instance types (None: the scenario's).
        instance_counts: instances per cluster (None: the scenario's).
        micro_batches: micro_batch values (each also needs global_batch to divide by dp x micro_batch).
        recompute: recompute modes.
        schedules: pipeline schedules for pp > 1 (pp 1 has no schedule: it is listed as 1f1b).
        virtual_stages: model chunks per stage tried with interleaving.
        max_cp: the largest context-parallel degree (powers of two up to it).
        zero: ZeRO stages (None: 0, 1 and 3 where the schema has training.zero, else 0 and 1).
        tp, pp: restrict the degrees (None: every valid one).
        stacks: the training stacks searched, each within what it runs (`stacks.runs`) (None: the scenario's
            stack when it names one, else every Neuron stack that runs on an instance type searched: `searched`).
        lnc: the LNC settings tried on instance types that have one (Trn2, Trn3) (None: every one allowed).
    """

    instance_types: tuple[str, ...] | None = None
    instance_counts: tuple[int, ...] | None = None
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    recompute: tuple[str, ...] = RECOMPUTE
    schedules: tuple[str, ...] = SCHEDULES
    virtual_stages: tuple[int, ...] = (2, 4)
    max_cp: int = 8
    zero: tuple[int, ...] | None = None
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    stacks: tuple[str, ...] | None = None
    lnc: tuple[int, ...] | None = None
    extra: tuple[dict, ...] = field(default_factory=tuple)


def _divisors(n: int) -> list[int]:
    """The divisors of n, ascending (trial division up to its square root: a cluster of a million ranks is
    instant)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def clusters(base: Scenario, space: SearchSpace) -> list[tuple[str, int, int, int]]:
    """(instance type, instances, lnc, ranks) of every cluster the search covers, in order."""
    types = space.instance_types or (base.cluster.instance,)
    counts = space.instance_counts or (base.cluster.instances,)
    out = []
    for inst in types:
        spec = INSTANCES[inst]
        for n in counts:
            us = ultraserver_default(inst) if inst != base.cluster.instance else base.cluster.ultraserver
            size = ultraserver_of(spec).instances if us and ultraserver_of(spec) else 1
            if n % size:                # UltraServers come in groups of 4 (Trn2, Trn3 Gen1) or 36 (Trn3 Gen2)
                continue
            lncs = spec.allowed_lnc if inst != base.cluster.instance or len(spec.allowed_lnc) > 1 else (base.cluster.lnc,)
            if space.lnc is not None and len(spec.allowed_lnc) > 1:
                lncs = tuple(x for x in lncs if x in space.lnc)
            for lnc in lncs:
                out.append((inst, n, lnc, n * ranks_per_instance(spec, lnc)))
    return out


def searched(base: Scenario, space: SearchSpace) -> tuple[str, ...]:
    """The stacks a search covers: `space.stacks`, else the scenario's own when it names one (`custom` included),
    else every Neuron stack that runs on an instance type searched (`stacks.NEURON_STACKS`)."""
    if space.stacks is not None:
        return space.stacks
    if stk.names_its_stack(base):
        return (base.stack,)
    chips = {stk.chip_of(t) for t in (space.instance_types or (base.cluster.instance,))}
    return tuple(n for n in stk.NEURON_STACKS if chips & set(stk.STACKS[n].support.chips[0]))


def own_stack(base: Scenario, space: SearchSpace) -> tuple[str, list[str]]:
    """The stack the scenario's own layout is evaluated as, and, when it is `custom` in a search of other stacks, why
    (each searched stack's first objection). A scenario that names its stack: that one; one that names none: the
    first stack searched that runs its layout (`custom` when none does)."""
    if stk.names_its_stack(base):
        return base.stack, []
    own, why = own_row(base), []
    for name in searched(base, space):
        found = stk.unsupported(name, stk.chip_of(own["instance"]), own["pp"], own["zero"], own["pp_schedule"],
                                own["cp"], own["ep"], own["lnc"], own["instance"])
        if not found:
            return name, []
        why.append(f"{found[0][0]} {found[0][1]}: {found[0][2]}")
    return "custom", why


def _zero_values(space: SearchSpace) -> tuple[int, ...]:
    return space.zero if space.zero is not None else zero_stages()


def _shapes(base: Scenario, space: SearchSpace, ranks: int):
    """(tp, cp, pp, dp, ep, micro_batch, microbatches, [(schedule, virtual stages), ...]) of every valid layout
    of a cluster of `ranks` ranks but its recompute mode and ZeRO stage, in the table's order."""
    m, t = base.model, base.training
    moe = m.moe
    tps = [tp for tp in _divisors(ranks) if m.heads % tp == 0 and (m.kv_heads % tp == 0 or tp % m.kv_heads == 0)
           and (tp == 1 or t.seq_len % tp == 0) and (space.tp is None or tp in space.tp)]
    for tp in tps:
        for cp in [c for c in _divisors(ranks // tp) if c <= space.max_cp and c & (c - 1) == 0
                   and t.seq_len % c == 0]:
            for pp in [p for p in _divisors(ranks // group_ranks(tp, cp)) if p <= m.layers
                       and (space.pp is None or p in space.pp)]:
                dp = data_parallel(ranks, tp, cp, pp)
                eps = [e for e in _divisors(dp) if moe and moe.experts % e == 0] if moe else [1]
                for ep in eps:
                    for mb in space.micro_batches:
                        if t.global_batch % (dp * mb):
                            continue
                        mbs = microbatches(t.global_batch, dp, mb)
                        scheds = [("1f1b", 1)] if pp == 1 else \
                            [(s, 1) for s in space.schedules if s != "interleaved"] + \
                            [("interleaved", v) for v in space.virtual_stages if "interleaved" in space.schedules
                             and pp * v <= m.layers and mbs % pp == 0]
                        yield tp, cp, pp, dp, ep, mb, mbs, scheds


def count_layouts(base: Scenario, space: SearchSpace = SearchSpace(),
                  stop_above: int | None = None) -> tuple[int, int]:
    """How many layouts `enumerate_layouts` generates (it may add one more: the scenario's own layout, when the
    search's rules leave it out), without building them: the plan's size before it starts.

    Args:
        stop_above: stop counting once the count passes this (the search is too large anyway).

    Returns:
        (layouts, clusters counted): every cluster of the search (`clusters`) unless the count stopped early.
    """
    per_shape = _stack_counter(base, space)
    total = counted = 0
    for inst, _, lnc, ranks in clusters(base, space):
        for tp, cp, pp, dp, ep, mb, mbs, scheds in _shapes(base, space, ranks):
            total += per_shape(inst, pp, cp, ep, lnc, scheds)
        counted += 1
        if stop_above is not None and total > stop_above:
            break
    return total, counted


def _stack_counter(base: Scenario, space: SearchSpace) -> Callable[..., int]:
    """f(instance, pp, cp, ep, lnc, schedules) → the layouts of one shape the searched stacks run (each recompute
    mode, ZeRO stage and schedule of it that a stack runs, summed over the stacks); memoized on what it reads."""
    zeros, names, seen = _zero_values(space), searched(base, space), {}

    def count(instance, pp, cp, ep, lnc, scheds) -> int:
        key = (instance, pp > 1, cp > 1, ep > 1, lnc, tuple(x[0] for x in scheds))
        if key not in seen:
            chip, sched = stk.chip_of(instance), [x[0] for x in scheds]
            seen[key] = len(space.recompute) * sum(int(stk.runs(
                n, chip, pp, np.repeat(zeros, len(sched)), sched * len(zeros), cp, ep, lnc).sum()) for n in names)
        return seen[key]
    return count


def enumerate_layouts(base: Scenario, space: SearchSpace = SearchSpace(),
                      progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Every valid layout of the search space, in a fixed order, with `microbatches` per replica.

    Args:
        progress: called with the layouts generated so far after each cluster (instance type, count, lnc).

    The layouts of each stack searched (`searched`) that it runs (`stacks.runs`), stack by stack, each row naming
    its stack (`stack`), with sequence parallelism as the stack runs it (`stacks.sequence_parallel`; on whenever tp
    > 1 for `custom`); the scenario's own layout as `own_stack` evaluates it.

    Returns:
        DataFrame with LAYOUT_COLUMNS and `microbatches`; row 0 is the scenario's own layout when the space
        covers its cluster.
    """
    zero_values = _zero_values(space)
    shapes: list[tuple] = []          # one per shape: its cluster, tp .. microbatches, and how many schedules
    scheds: list[tuple[str, int]] = []
    counter = _stack_counter(base, space)
    total = 0
    for inst, n, lnc, ranks in clusters(base, space):
        for tp, cp, pp, dp, ep, mb, mbs, sc in _shapes(base, space, ranks):
            shapes.append((inst, n, lnc, tp, pp, cp, ep, dp, mb, mbs, len(sc)))
            scheds += sc
            total += counter(inst, pp, cp, ep, lnc, sc)
        if progress is not None:
            progress(total)
    cols = _stack_rows(base, space, _layout_columns(shapes, scheds, space.recompute, zero_values))
    own = own_row(base)
    own["stack"] = own_stack(base, space)[0]
    for r in reversed([own] + [dict(r) for r in space.extra]):
        if r is None or (r["instance"], r["instances"], r["lnc"]) not in \
                {(c[0], c[1], c[2]) for c in clusters(base, space)}:
            continue
        same = np.ones(len(cols["tp"]), dtype=bool)
        for k in LAYOUT_COLUMNS:
            same &= np.broadcast_to(cols[k] == r[k], same.shape)
        for k, v in cols.items():         # first, and no other row the same
            cols[k] = np.concatenate([np.array([r[k]], dtype=v.dtype), v[~same]])
    text = "str" if total else object        # (object, as ever, in a search that generated no layout)
    return pd.DataFrame({k: pd.Series(v, dtype=text) if v.dtype == object else v for k, v in cols.items()})


def _stack_rows(base: Scenario, space: SearchSpace, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The layouts of `cols` (every stack's candidates) that each searched stack runs, stack after stack, with
    the `stack` column and each stack's sequence parallelism."""
    codes, kinds = pd.factorize(cols["instance"])
    chip = np.array([stk.chip_of(t) for t in kinds] + [None], dtype=object)[codes]
    parts = []
    for name in searched(base, space):
        keep = stk.runs(name, chip, cols["pp"], cols["zero"], cols["pp_schedule"], cols["cp"], cols["ep"], cols["lnc"])
        part = {k: v[keep] for k, v in cols.items()}
        sp = stk.sequence_parallel(name, base)
        if sp is not None:
            part["sequence_parallel"] = sequence_parallel_default(part["tp"]) if sp else np.zeros(int(keep.sum()),
                                                                                                   dtype=bool)
        part["stack"] = np.full(int(keep.sum()), name, dtype=object)
        parts.append(part)
    return {k: np.concatenate([p[k] for p in parts]) for k in ["stack", *cols]}


def _layout_columns(shapes: list[tuple], scheds: list[tuple[str, int]], recompute: tuple[str, ...],
                    zero_values: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The table's columns (LAYOUT_COLUMNS and `microbatches`) from its shapes: each shape's rows are its recompute
    modes, then its ZeRO stages, then its schedules (`scheds`, each shape's consecutively), as nested loops would
    list them."""
    numbers = np.array([s[1:] for s in shapes], dtype=np.int64).reshape(len(shapes), 10)
    n_sched = numbers[:, -1]
    counts = len(recompute) * len(zero_values) * n_sched
    shape = np.repeat(np.arange(len(shapes)), counts)
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    s = n_sched[shape]
    sched = np.repeat(np.cumsum(n_sched) - n_sched, counts) + within % s
    stage_and_mode = within // s
    tp = numbers[shape, 2]
    sched_names = np.array([x[0] for x in scheds], dtype=object)
    virtual = np.array([x[1] for x in scheds], dtype=np.int64)
    return {"instance": np.array([x[0] for x in shapes], dtype=object)[shape],
            **{k: numbers[shape, j] for j, k in enumerate(("instances", "lnc", "tp", "pp", "cp", "ep", "dp",
                                                            "micro_batch"))},
            "recompute": np.array(recompute, dtype=object)[stage_and_mode // len(zero_values)],
            "pp_schedule": sched_names[sched], "virtual_stages": virtual[sched],
            "zero": np.array(zero_values, dtype=np.int64)[stage_and_mode % len(zero_values)],
            "sequence_parallel": sequence_parallel_default(tp), "microbatches": numbers[shape, 8]}


def own_row(base: Scenario) -> dict:
    """The scenario's own layout as a table row."""
    p, t, c = base.parallelism, base.training, base.cluster
    zero = int(t.zero)
    return {"instance": c.instance, "instances": c.instances, "lnc": c.lnc, "tp": p.tp, "pp": p.pp, "cp": p.cp,
            "ep": p.ep, "dp": p.dp, "micro_batch": t.micro_batch, "recompute": t.recompute,
            "pp_schedule": p.pp_schedule if p.pp > 1 else "1f1b", "virtual_stages": p.virtual_stages, "zero": zero,
            "sequence_parallel": p.sequence_parallel, "microbatches": microbatches(t.global_batch, p.dp, t.micro_batch)}


def parse_instances(text: str) -> tuple[int, ...]:
    """`--instances 16,32,64` → (16, 32, 64); bad input names the flag."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or any(v < 1 for v in values):
        raise ScenarioError([Problem("--instances", text, "a comma-separated list of instance counts >= 1, "
                                                          "e.g. 16,32,64")])
    return tuple(dict.fromkeys(values))


def parse_instance_types(text: str) -> tuple[str, ...]:
    """`--instance-types trn1.32xlarge,trn2.48xlarge` → a tuple; bad input names the flag."""
    values = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [v for v in values if v not in INSTANCES]
    if not values or bad:
        raise ScenarioError([Problem("--instance-types", text, "a comma-separated list of instance types from: "
                                                               + ", ".join(INSTANCES))])
    return tuple(dict.fromkeys(values))


def _int_list(flag: str, text: str, example: str, ok=lambda v: v >= 1,
              allowed: str = "integers >= 1") -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        values = ()
    if not values or not all(ok(v) for v in values):
        raise ScenarioError([Problem(flag, text, f"a comma-separated list of {allowed}, e.g. {example}")])
    return tuple(dict.fromkeys(values))


def _choices(flag: str, text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    values = tuple(x.strip() for x in str(text).split(",") if x.strip())
    if not values or any(v not in allowed for v in values):
        raise ScenarioError([Problem(flag, text, "a comma-separated list from: " + ", ".join(allowed))])
    return tuple(dict.fromkeys(values))


def _stack_choices(flag: str, text: str) -> tuple[str, ...]:
    """`--stack`: stack names, or the short labels a plan's rows show (nxd, nemo, megatron)."""
    full = {short: name for name, short in stk.SHORT.items()}
    values = ",".join(full.get(x.strip(), x.strip()) for x in str(text).split(","))
    try:
        return _choices(flag, values, stk.NAMES)
    except ScenarioError:
        raise ScenarioError([Problem(flag, text, "a comma-separated list from: " + ", ".join(stk.NAMES) +
                                     " (or the labels a plan shows: " + ", ".join(
                                         s for n, s in stk.SHORT.items() if s != n) + ")")]) from None


def zero_stages() -> tuple[int, ...]:
    """The ZeRO stages a search covers by default: 0, 1 and 3 (`training.zero`)."""
    return (0, 1, 3)


def search_space(instance_types: str | None = None, instances: str | None = None, tp: str | None = None,
                 pp: str | None = None, max_cp: str | int | None = None, max_zero: str | int | None = None,
                 micro_batches: str | None = None, recompute: str | None = None, schedules: str | None = None,
                 virtual_stages: str | None = None, stacks: str | None = None,
                 lnc: str | None = None) -> SearchSpace:
    """The command line's search limits (`plan --tp 8,16 --max-zero 1 ...`, each a string as typed, None: the
    default) → a SearchSpace. Every bad flag is reported, each naming itself (ScenarioError)."""
    problems: list[Problem] = []
    kw: dict = {}

    def take(key: str, parse, *args):
        try:
            kw[key] = parse(*args)
        except ScenarioError as err:
            problems.extend(err.problems)

    if instance_types is not None:
        take("instance_types", parse_instance_types, instance_types)
    if instances is not None:
        take("instance_counts", parse_instances, instances)
    if tp is not None:
        take("tp", _int_list, "--tp", tp, "8,16,32")
    if pp is not None:
        take("pp", _int_list, "--pp", pp, "1,2,4,8")
    if micro_batches is not None:
        take("micro_batches", _int_list, "--micro-batches", micro_batches, "1,2")
    if virtual_stages is not None:
        take("virtual_stages", _int_list, "--virtual-stages", virtual_stages, "2,4", lambda v: v >= 2,
             "integers >= 2")
    if recompute is not None:
        take("recompute", _choices, "--recompute", recompute, RECOMPUTE)
    if schedules is not None:
        take("schedules", _choices, "--schedules", schedules, SCHEDULES)
    if stacks is not None:
        take("stacks", _stack_choices, "--stack", stacks)
    if lnc is not None:
        take("lnc", _int_list, "--lnc", lnc, "2", lambda v: v in (1, 2), "LNC settings, 1 or 2")
    if max_cp is not None:
        try:
            kw["max_cp"] = int(str(max_cp))
        except ValueError:
            kw["max_cp"] = 0
        if kw["max_cp"] < 1:
            problems.append(Problem("--max-cp", max_cp, "one integer >= 1: the largest context-parallel degree "
                                                        "(powers of two up to it), e.g. 1 (none) or 8"))
    if max_zero is not None:
        stages = zero_stages()
        try:
            top = int(str(max_zero))
        except ValueError:
            top = -1
        if top not in stages:
            problems.append(Problem("--max-zero", max_zero, "one of: " + ", ".join(map(str, stages))
                                    + " (the highest ZeRO stage tried)"))
        else:
            kw["zero"] = tuple(z for z in stages if z <= top)
    if problems:
        raise ScenarioError(problems)
    return SearchSpace(**kw)


def parse_prices(text: str) -> tuple[float | None, dict[str, float]]:
    """`--price-per-hour 40` or `--price-per-hour trn2.48xlarge=40,trn3.48xlarge=60` → (the plain price, which
    is the scenario's own instance type's, as `cluster.price_per_hour_usd`; the prices by instance type), in US
    dollars per instance-hour. Bad input names the flag."""
    plain, by_type, bad = None, {}, False
    for item in (x.strip() for x in str(text).split(",")):
        name, _, value = item.rpartition("=")
        try:
            usd = float(value)
        except ValueError:
            usd = float("nan")
        if not (PRICE_RANGE[0] <= usd <= PRICE_RANGE[1]) or (name and name not in INSTANCES) or \
                (not name and "=" in item):
            bad = True
        elif name:
            by_type[name] = usd
        elif plain is None:
            plain = usd
        else:
            bad = True
    if bad or (plain is None and not by_type):
        raise ScenarioError([Problem("--price-per-hour", text, f"US dollars per instance-hour from {PRICE_RANGE[0]:g} "
                                     f"to {PRICE_RANGE[1]:,.0f} (the scenario's instance type; {PRICE_WHY}), or "
                                     "TYPE=USD pairs, e.g. trn2.48xlarge=40,trn3.48xlarge=60, TYPE from: "
                                     + ", ".join(INSTANCES))])
    return plain, by_type
