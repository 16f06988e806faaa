"""The planner's options checked before a search starts: instance prices resolved, flags and their
combinations validated (each bad one named), and the search's size bounded (the catalog's largest cluster, a
search estimated beyond `--max-search-minutes` refused). Pure: no Ray, nothing evaluated."""
from __future__ import annotations

import math

import numpy as np

from .. import stacks
from ..cluster.catalog import INSTANCES, NO_PRICE, largest_cluster, largest_cluster_text
from ..errors import Problem, ScenarioError
from ..layouts import ranking
from ..layouts.space import SearchSpace, clusters, count_layouts
from ..report.progress import duration
from ..scenario import Scenario

from ..step.price import CATALOG_PRICE, instance_price, price_source  # noqa: F401 (CATALOG_PRICE: plan)
MAX_TOP = 20                   # layouts replayed at most: each is a `run` with its own actors (seconds to a minute
                               # each on the 2-CPU development machine); plan.csv ranks every layout anyway
SLOWEST_LAYOUTS_PER_CPU_S = 1000.0   # per CPU, for the search's time estimate: under a third of the slowest rate
                               # measured (docs/performance.md: the 405B search on trn2, 3,500 layouts per CPU-second;
                               # a loaded machine gets less of each CPU), so "too large" comes before a long search
MAX_SEARCH_MINUTES = 10.0      # default --max-search-minutes: a longer search is refused before it starts


def resolve_prices(base: Scenario, space: SearchSpace, given: dict[str, float] | None
                   ) -> tuple[dict[str, float | None], dict[str, str]]:
    """Every searched instance type's price, USD per instance-hour (None: unknown), and where it comes from:
    `--price-per-hour TYPE=USD` (`given`), else the scenario's `cluster.price_per_hour_usd` (its own instance
    type), else the catalog's public price."""
    types = space.instance_types or (base.cluster.instance,)
    prices, sources = {}, {}
    for t in types:
        if given and t in given:
            prices[t], sources[t] = float(given[t]), "--price-per-hour"
            continue
        override = base.cluster.price_per_hour_usd if t == base.cluster.instance else None
        prices[t] = instance_price(t, override)             # the one lookup (`run`'s too)
        sources[t] = NO_PRICE if prices[t] is None else price_source(t, override)
    return prices, sources


def check_options(base: Scenario, space: SearchSpace, objective: str, tokens: float | None,
                   max_usd_per_hour: float | None, top: int, prices: dict[str, float | None],
                   given: dict[str, float] | None, hbm_headroom: float,
                   max_search_minutes: float = MAX_SEARCH_MINUTES, rank_by: str = "low") -> list[str]:
    """Bad option combinations raise ScenarioError naming the flag; returns notes for the plan."""
    problems, notes = [], []
    if rank_by not in ranking.RANK_BY:
        problems.append(Problem("--rank-by", rank_by, "one of: low (the pessimistic end of the 80 % interval, the "
                                                      "default), point, high (the optimistic end)"))
    if not (isinstance(max_search_minutes, (int, float)) and math.isfinite(max_search_minutes)
            and max_search_minutes > 0):
        problems.append(Problem("--max-search-minutes", max_search_minutes, "a number of minutes > 0"))
    if not (isinstance(hbm_headroom, (int, float)) and math.isfinite(hbm_headroom) and 0 <= hbm_headroom < 1):
        problems.append(Problem("--hbm-headroom", hbm_headroom, "a fraction of HBM to leave free, 0 <= x < 1 "
                                                                "(0.05: a layout may use 95 %)"))
    if objective not in ranking.OBJECTIVES:
        problems.append(Problem("--objective", objective, "one of: " + ", ".join(ranking.OBJECTIVES)))
    if objective == "time_to_train" and tokens is None and getattr(base.training, "budget_tokens", None) is None \
            and getattr(base.training, "budget_steps", None) is None:
        problems.append(Problem("--tokens", "<missing>", "a number of tokens > 0 with --objective time_to_train "
                                                         "(or the scenario's training.budget_tokens or budget_steps)"))
    if tokens is not None and not (isinstance(tokens, (int, float)) and math.isfinite(tokens) and tokens > 0):
        problems.append(Problem("--tokens", tokens, "a number of tokens > 0, e.g. 15e12"))
    if max_usd_per_hour is not None and not (math.isfinite(max_usd_per_hour) and max_usd_per_hour > 0):
        problems.append(Problem("--max-usd-per-hour", max_usd_per_hour, "a number of US dollars > 0"))
    if not 1 <= top <= MAX_TOP:
        problems.append(Problem("--top", top, f"an integer from 1 to {MAX_TOP} (each is replayed with `run`; "
                                              f"plan.csv ranks every layout)"))
    unpriced = [t for t, usd in prices.items() if usd is None]
    if unpriced and (objective == "usd_per_million_tokens" or max_usd_per_hour is not None):
        flag = "--objective" if objective == "usd_per_million_tokens" else "--max-usd-per-hour"
        own = base.cluster.instance in unpriced
        problems.append(Problem(flag, objective if flag == "--objective" else max_usd_per_hour,
                                f"a price for every instance type searched, and {', '.join(unpriced)} has "
                                f"{NO_PRICE}" + (f" (the scenario's {base.cluster.instance})" if own else "")
                                + " or --price-per-hour TYPE=USD (e.g. "
                                + ",".join(f"{t}=USD" for t in unpriced) + "); or rank by tokens_per_s or "
                                "time_to_train"))
    elif unpriced:
        notes.append(f"{', '.join(unpriced)}: {NO_PRICE} (or --price-per-hour TYPE=USD): their layouts have no "
                     f"cost")
    ignored = sorted(set(given or {}) - set(prices))
    if ignored:
        notes.append(f"--price-per-hour: {', '.join(ignored)} not searched (--instance-types): its price is unused")
    problems += _stack_problems(base, space)
    too_many = _beyond_largest_cluster(base, space)
    if too_many:
        problems.append(too_many)
    elif not clusters(base, space):
        problems.append(Problem("--instances", ",".join(map(str, space.instance_counts or ())),
                                "instance counts the instance types can form (UltraServers: multiples of 4)"))
    if problems:
        raise ScenarioError(problems)
    return notes


def _stack_problems(base: Scenario, space: SearchSpace) -> list[Problem]:
    """`--stack` naming a stack that runs on no instance type searched, `--lnc` where no type searched has an LNC
    setting: each named with what would do."""
    types = space.instance_types or (base.cluster.instance,)
    chips = {stacks.chip_of(t) for t in types}
    out = []
    if space.stacks is not None:
        idle = [n for n in space.stacks if not chips & set(stacks.STACKS[n].support.chips[0])]
        if idle:
            runs = [n for n in stacks.NAMES if chips & set(stacks.STACKS[n].support.chips[0])]
            out.append(Problem("--stack", ",".join(space.stacks), (
                f"stacks that run on an instance type searched ({', '.join(types)}): {', '.join(runs)}; "
                + "; ".join(f"{n} runs on {', '.join(c + '*' for c in stacks.STACKS[n].support.chips[0])} "
                            f"({stacks.STACKS[n].support.chips[1]})" for n in idle))))
    if space.lnc is not None and not any(len(INSTANCES[t].allowed_lnc) > 1 for t in types):
        out.append(Problem("--lnc", ",".join(map(str, space.lnc)), (
            f"an instance type with an LNC setting (trn2*, trn3*) among those searched ({', '.join(types)}: "
            f"LNC 1 only); add one with --instance-types, or leave --lnc out")))
    return out


def _beyond_largest_cluster(base: Scenario, space: SearchSpace) -> Problem | None:
    """An instance count beyond the catalog's largest cluster of its instance type's chip, as the flag's problem."""
    types = space.instance_types or (base.cluster.instance,)
    counts = space.instance_counts or (base.cluster.instances,)
    limit, kind = min((largest_cluster(INSTANCES[t]), t) for t in types)
    over = [n for n in counts if n > limit]
    if not over:
        return None
    given = over[0] if len(over) == 1 else ",".join(map(str, over))
    # the bound `run` and `validate` apply to cluster.instances (scenario.checks.check_bounds), in the same words
    return Problem("--instances" if space.instance_counts else "cluster.instances", given,
                   largest_cluster_text(INSTANCES[kind]))


def check_size(base: Scenario, space: SearchSpace, max_search_minutes: float) -> int:
    """The layouts the search will evaluate (`count_layouts`); a search whose estimated time, at the slowest
    measured rate (SLOWEST_LAYOUTS_PER_CPU_S per CPU it can use: `plan_tasks.search_cpus`), exceeds
    `max_search_minutes` is refused before it starts, naming its size and what to narrow."""
    from ..actors import plan_tasks

    cpus = plan_tasks.search_cpus()
    rate = SLOWEST_LAYOUTS_PER_CPU_S * cpus
    budget = int(max_search_minutes * 60 * rate)
    n, counted = count_layouts(base, space, stop_above=budget)
    if n == 0 and not space.extra and (given := narrowed(space)):
        # a filter that leaves nothing is said, never a plan of the scenario's own layout alone
        flags = " ".join(f"{f} {v}" for f, v in given)
        raise ScenarioError([Problem(given[0][0] if len(given) == 1 else "plan", flags if len(given) > 1 else
                                     given[0][1], (
            f"values that leave at least one layout to search: {flags} matches none for {base.name} "
            f"({base.model.heads} heads, {base.model.layers} layers, global_batch {base.training.global_batch}) on "
            f"the clusters searched (each layout's degrees must fit the model's heads, layers and batch and the "
            f"cluster's ranks: docs/plan.md); widen or drop it"))])
    if n <= budget:
        return n
    every = len(clusters(base, space))
    total = n * every / counted                       # the clusters not counted, at the counted ones' mean
    counts = space.instance_counts or (base.cluster.instances,)
    flag = "--instances" if space.instance_counts else "--instance-types"
    given = ",".join(map(str, counts)) if flag == "--instances" else ",".join(space.instance_types or ())
    size = f"{n:,} layouts" if counted == every else \
        f"{n:,} layouts in its first {counted:,} of {every:,} clusters (about {total:,.0f} in all)"
    raise ScenarioError([Problem(flag, given, (
        f"a search that ends within --max-search-minutes {max_search_minutes:g}: this one has {size}, about "
        f"{duration(total / rate)} at {rate:,.0f} layouts/s ({cpus} CPU{'s' * (cpus != 1)}). Ask for fewer "
        f"instance counts (a few sizes, e.g. {','.join(map(str, _few(counts)))}) or instance types, or allow it "
        f"with --max-search-minutes {math.ceil(total / rate / 60)}"))])


# SearchSpace's fields that narrow the search, as the flags that set them (`plan --tp 3`)
NARROWING = (("tp", "--tp"), ("pp", "--pp"), ("micro_batches", "--micro-batches"), ("recompute", "--recompute"),
             ("schedules", "--schedules"), ("virtual_stages", "--virtual-stages"), ("max_cp", "--max-cp"),
             ("zero", "--max-zero"), ("stacks", "--stack"), ("lnc", "--lnc"), ("instance_types", "--instance-types"),
             ("instance_counts", "--instances"))


def narrowed(space: SearchSpace) -> list[tuple[str, str]]:
    """The flags that set the search space away from its defaults, with their values as typed (comma-joined)."""
    default = SearchSpace()
    out = []
    for name, flag in NARROWING:
        value = getattr(space, name)
        if value != getattr(default, name):
            out.append((flag, ",".join(map(str, value)) if isinstance(value, tuple) else str(value)))
    return out


def _few(counts: tuple[int, ...], most: int = 5) -> list[int]:
    """Up to `most` of the counts, spread from the smallest to the largest (a suggestion)."""
    ordered = sorted(set(counts))
    if len(ordered) <= most:
        return ordered
    picks = np.unique(np.geomspace(ordered[0], ordered[-1], most).round().astype(int))
    return [min(ordered, key=lambda c: abs(c - p)) for p in picks]
