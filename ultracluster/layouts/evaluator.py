"""Layout rows → their scenarios and clusters, and what a process timing layouts keeps: memoized collectives
(`MemoCommTimes`, how the step's comm's pieces time them here), cluster figures, memoized pieces."""
from __future__ import annotations

import copy
from operator import is_
from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np

from .. import chip, stacks
from .. import operators as opslib
from ..cluster import Cluster, build_cluster, cluster_calibration
from ..calibration.factors import Calibration
from ..calibration.fitted_files import fitted
from ..frozen import replaced
from ..memory import capacity_gib
from ..network import collective_time
from ..network.collectives import concurrent_time
from ..network.contention import concurrent_times
from ..network.settings import collective_times
from ..replay.comm import CommTimes
from ..scenario import Scenario
from ..step import merit
from ..step.counts import data_parallel, ultraserver_default
from ..step.price import instance_price

# the layout columns of a plan table, in plan.csv order (`stack`: the training stack that runs it, `stacks.NAMES`)
LAYOUT_COLUMNS = ("stack", "instance", "instances", "lnc", "tp", "pp", "cp", "ep", "dp", "micro_batch", "recompute",
                  "pp_schedule", "virtual_stages", "zero", "sequence_parallel")
MEMORY_COLUMNS = ("hbm_peak_gib", "hbm_capacity_gib", "worst_stage", "weights_gib", "gradients_gib", "optimizer_gib",
                  "activations_gib", "reserve_gib")
PARTS = ("memory", "chunks", "comm")
SCHEDULES_BY_CODE = ("gpipe", "1f1b", "interleaved")
SCHEDULE_CODE = {name: i for i, name in enumerate(SCHEDULES_BY_CODE)}
# the Calibration switches (its bool fields: mechanisms on or off): one Evaluator times every row with one operator list
SWITCHES = tuple(f.name for f in fields(Calibration) if f.type in ("bool", bool))


def calibration_index(row: Any) -> int:
    """The row's calibration: column `cal`, an index into `Evaluator.calibrations` (0 when the table has none)."""
    return int(row.get("cal", 0) if isinstance(row, dict) else getattr(row, "cal", 0))


def layout_scenario(base: Scenario, row: Any, name: str | None = None) -> Scenario:
    """The scenario of one layout: `base` with the row's cluster, parallelism and training fields, and, where the
    row names its stack, as that stack runs it (`stacks.for_cell`: its defaults for the keys the scenario did not
    give).

    Built with pydantic's `model_copy` (no validation): rows come from the search space, which holds only
    valid layouts (tests/plan/test_space.py loads them through `load_scenario`); `plan.scenario_dict` gives
    the YAML-ready form that `run` validates.
    """
    get = row.get if isinstance(row, dict) else (lambda k: getattr(row, k))
    stack = row.get("stack") if isinstance(row, dict) else getattr(row, "stack", None)
    if stack is not None:
        base = stacks.for_cell(base, str(stack), int(get("pp")) > 1)
    par = base.parallelism.model_copy(update={
        "tp": int(get("tp")), "pp": int(get("pp")), "cp": int(get("cp")), "ep": int(get("ep")),
        "dp": int(get("dp")), "sequence_parallel": bool(get("sequence_parallel")),
        "pp_schedule": str(get("pp_schedule")), "virtual_stages": int(get("virtual_stages"))})
    zero = int(get("zero"))
    train_upd: dict[str, Any] = {"micro_batch": int(get("micro_batch")), "recompute": str(get("recompute")),
                                 "zero1": zero >= 1, "zero": zero}
    train = base.training.model_copy(update=train_upd)
    cl = base.cluster
    instance = str(get("instance"))
    upd: dict[str, Any] = {"instance": instance, "instances": int(get("instances")), "lnc": int(get("lnc"))}
    if instance != cl.instance:        # the new instance type's own UltraServer default, and the catalog's price
        upd["ultraserver"] = ultraserver_default(instance)
        upd["price_per_hour_usd"] = None
    faults = base.faults.model_copy(update={"degraded": []}) if base.faults and base.faults.degraded else base.faults
    return base.model_copy(update={"parallelism": par, "training": train, "cluster": cl.model_copy(update=upd),
                                   "faults": faults, **({"name": name} if name else {})})


@dataclass
class ClusterInfo:
    """One (instance type, instances, lnc): its Cluster (layout a placeholder), rank rates and price."""

    cluster: Cluster
    rates: chip.RankRates
    chips: int
    peak_flop_per_s: float
    price_per_hour_usd: float        # of one instance; NaN when the catalog has no price
    capacity_gib: float


# the memo entries that depend on the keys a stack times a layout by beyond its columns (`stacks.TIMING_KEYS`:
# the attention kernel and dropout change a shape's operators, TP overlap a layer's exposed collectives): kept per
# `Evaluator.variant`; every other entry (clusters, collectives, sends, gradient buckets, pipelines, speeds) is shared
CELL_MEMO = frozenset({"shape", "shape-alike", "saved-alike", "layer-comm", "training", "layout-scenario"})


def timing_values(scenario: Scenario) -> tuple:
    """The values of `stacks.TIMING_KEYS` of a scenario: layouts that agree on them share an Evaluator variant."""
    return tuple(getattr(getattr(scenario, k.split(".")[0]), k.split(".")[1]) for k in stacks.TIMING_KEYS)


class Evaluator:
    """What a process evaluating layouts of one scenario keeps: clusters, memoized collectives and pieces.

    Layouts of several stacks (a table's `stack` column) are timed by variants of it (`variant`): one per setting
    of the keys a stack times by beyond a layout's columns (`stacks.TIMING_KEYS`), each with its own operators
    and shapes (CELL_MEMO), all sharing the clusters, collectives and the other memo entries."""

    def __init__(self, scenario: Scenario, calibration: Calibration | None = None,
                 sources: dict[str, str] | None = None, shared_last_sends: bool = False,
                 calibrations: tuple[Calibration, ...] | None = None, degraded: tuple = (), links=None):
        """`calibrations`: several settings of the numeric factors (the interval's factor ends); a table's
        `cal` column picks one per row. Their switches must agree (one operator list times every row).
        `degraded`: the scenario's degraded parts (`cluster.DegradedPart`, `Cluster.degraded`), timed as the
        replay does (`replay.degraded.slowest_replica_comm`; the table's rows must share one layout, the degraded
        replicas touched alike: `replay.degraded.touched_alike`); `links`: one part, whose degraded links this
        Evaluator times every collective on (`Cluster.degraded_copy`: a companion of one with `degraded`)."""
        self.scenario = scenario
        self.degraded, self.links = tuple(degraded), links
        self._slow: list | None = None
        self._parent: Evaluator | None = None       # a companion's (`slow`): whose clusters it degrades
        self.shared_last_sends = shared_last_sends
        self.calibrations = tuple(calibrations) if calibrations else (calibration or fitted(),)
        self.calibration = self.calibrations[0]
        switches = {(f, getattr(c, f)) for c in self.calibrations for f in SWITCHES}
        if len(switches) != len(SWITCHES):
            raise ValueError(f"Evaluator calibrations differ in a switch ({', '.join(SWITCHES)}); "
                             "only numeric factors may vary between rows")
        self.library = opslib.library_for(scenario)
        # one implementation: every part is timed batched (`sources` is kept for its callers and plan.json)
        if sources and any(v != "batched" for v in sources.values()):
            raise ValueError(f"every part of the fast path is batched (one implementation); given {sources}")
        self.sources = {part: "batched" for part in PARTS}
        self._clusters: dict[tuple, ClusterInfo] = {}
        self._like: dict[tuple, ClusterInfo] = {}   # each (instance type, instances, lnc)'s first ClusterInfo
        self._coll: dict[tuple, float] = {}
        self._conc: dict[tuple, float] = {}
        self._net_ids: dict[tuple, int] = {}       # `network_ids`, and the memos of the settings' collectives by them
        self._coll_many: dict[tuple, dict[int, float]] = {}
        self._conc_many: dict[tuple, dict[int, float]] = {}
        self._memo: dict[tuple, Any] = {}          # CELL_MEMO entries: this variant's
        self._shared: dict[tuple, Any] = {}        # the others: every variant's
        self._variants: dict[tuple, Evaluator] = {timing_values(scenario): self}

    def variant(self, scenario: Scenario) -> "Evaluator":
        """The Evaluator of `scenario` (this one's with another stack's timing keys: `stacks.for_cell`), sharing this
        one's clusters, collectives and stack-free memo entries; one per distinct `timing_values`."""
        key = timing_values(scenario)
        p = self._variants.get(key)
        if p is None:
            p = self._variants[key] = copy.copy(self)
            p.scenario = scenario
            p._memo = {}
        return p

    # --- clusters and collectives ------------------------------------------------------------------
    def cluster(self, instance: str, instances: int, lnc: int, cal: int = 0, part: int | None = None) -> ClusterInfo:
        """The ClusterInfo of (instance type, instances, lnc) under calibration `cal` (an index), kept. Under a further
        calibration of a cluster it holds, only the calibration and the rank rates differ (`build_cluster`'s and
        `chip.rank_rates`' other inputs, and the price, peak and HBM, do not depend on it): that cluster with this
        calibration, as `build_cluster` applies it (`cluster_calibration`), and its rates (an interval's settings).
        `part`: on the links of degraded part `part` (its companion's, `slow`)."""
        if part is not None:
            return self.slow()[part].cluster(instance, instances, lnc, cal)
        key = (str(instance), int(instances), int(lnc), int(cal))
        info = self._clusters.get(key)
        if info is not None:
            return info
        like = self._like.get(key[:3])      # the cluster under another calibration
        if self._parent is not None:     # a companion: its parent's cluster on degraded links
            parent = self._parent.cluster(*key)
            placed = (replaced(like.cluster, {"calibration": parent.cluster.calibration}) if like is not None
                      else self._placed(parent.cluster))
            info = replaced(parent, {"cluster": placed})
        elif like is not None:      # (rates read no collective factor: a setting of those alone keeps them)
            cl = replaced(like.cluster, {"calibration": cluster_calibration(self.scenario, self.calibrations[key[3]])})
            info = replaced(like, {"cluster": cl, "rates": like.rates if _chip_alike(cl.calibration, like.cluster.calibration)
                                   else chip.rank_rates(cl, self.scenario.training.precision)})
        else:
            cl = self._placed(self.layout_cluster({"instance": key[0], "instances": key[1], "lnc": key[2], "cal": key[3],
                                      "tp": 1, "pp": 1,
                                      "cp": 1, "ep": 1, "dp": 0, "micro_batch": 1, "recompute": "none",
                                      "pp_schedule": "1f1b", "virtual_stages": 1, "zero": 1,
                                      "sequence_parallel": False}))
            prec = self.scenario.training.precision
            own = self.scenario.cluster   # the user's time is for the scenario's own instance type (`layout_scenario`)
            price = instance_price(key[0], own.price_per_hour_usd if key[0] == own.instance else None)
            info = ClusterInfo(cluster=cl, rates=chip.rank_rates(cl, prec), chips=cl.chips,
                               peak_flop_per_s=merit.peak_flop_per_s(cl.chips, cl.chip, prec),
                               price_per_hour_usd=float("nan") if price is None else float(price),
                               capacity_gib=capacity_gib(cl))
        self._like.setdefault(key[:3], info)
        self._clusters[key] = info
        return info

    def layout_cluster(self, row: Any) -> Cluster:
        """The Cluster of one layout (one actor shard: shards never change a prediction). dp 0: all ranks."""
        row = dict(row) if isinstance(row, dict) else row._asdict()
        cal = self.calibrations[calibration_index(row)]

        def scenario():         # the same for every calibration (a cluster's ranks do not depend on one)
            if not row["dp"]:
                sc = layout_scenario(self.scenario, {**row, "dp": 1})
                row["dp"] = data_parallel(build_cluster(sc, row["instances"], cal).ranks, row["tp"], row["cp"],
                                          row["pp"])
            return layout_scenario(self.scenario, row)

        sc = self.memo(("layout-scenario", tuple((k, v) for k, v in row.items() if k != "cal")), scenario)
        return build_cluster(sc, int(row["instances"]), cal)

    def add_calibrations(self, calibrations) -> np.ndarray:
        """The indices (a table's `cal` column) of `calibrations` among this Evaluator's, those it lacks appended
        (the memo keys name a calibration by its index, so what was timed stays; companions follow)."""
        have: dict[Calibration, int] = {}
        for i, c in enumerate(self.calibrations):       # equal settings: the first's index (its objects: the
            have.setdefault(c, i)                       # cluster it shares rank rates with, `_chip_alike`)
        new = tuple(dict.fromkeys(c for c in calibrations if c not in have))
        if new:
            if {(f, getattr(c, f)) for c in new for f in SWITCHES} - {(f, getattr(self.calibration, f))
                                                                     for f in SWITCHES}:
                raise ValueError(f"Evaluator calibrations differ in a switch ({', '.join(SWITCHES)}); "
                                 "only numeric factors may vary between rows")
            have.update({c: len(self.calibrations) + i for i, c in enumerate(new)})
            self.calibrations += new
            for s in self._slow or ():
                s.calibrations = self.calibrations
        return np.array([have[c] for c in calibrations], dtype=np.int64)

    def _placed(self, cl: Cluster) -> Cluster:
        """`cl` on this Evaluator's degraded links (`links`), else as it is."""
        return cl if self.links is None else cl.degraded_copy(self.links)

    def slow(self) -> list["Evaluator"]:
        """One Evaluator per degraded part (`degraded`), timing the step's comm on that part's links: the `slows`
        of `replay.degraded.slowest_replica_comm`; their own memo, clusters and collectives."""
        if self._slow is None:
            self._slow = [Evaluator(self.scenario, calibrations=self.calibrations,
                                    shared_last_sends=self.shared_last_sends, links=part) for part in self.degraded]
            for s in self._slow:
                s._parent = self
        return self._slow

    def collective(self, ck: tuple, op: str, nbytes: float, group) -> float:
        """`collective_time` seconds as the step's graph issues it, memoized."""
        key = (self._network(ck), op, float(nbytes), group)
        t = self._coll.get(key)
        if t is None:
            t = self._coll[key] = collective_time(self.cluster(*ck).cluster, op, float(nbytes), group, in_graph=True)[0]
        return t

    def collectives(self, nets: list[int], clusters: list, op: str, nbytes: float, group) -> np.ndarray:
        """`collective` on each of `clusters` (one placement under several calibrations, `network_ids` `nets`),
        those not memoized timed at once (`network.settings.collective_times`)."""
        return _memo_many(self._coll_many.setdefault((op, float(nbytes), group), {}), nets, clusters,
                          lambda cls: collective_times(cls, op, float(nbytes), group, in_graph=True))

    def network_ids(self, cks: list[tuple]) -> list[int]:
        """Each cluster's `_network` as a number, the same for the same (kept by the Evaluator)."""
        return [self._net_ids.setdefault(self._network(ck), len(self._net_ids)) for ck in cks]

    def concurrent_first(self, ck: tuple, transfers: tuple) -> float:
        """`concurrent_time(...)[0]`, memoized."""
        key = (self._network(ck), transfers)
        t = self._conc.get(key)
        if t is None:
            t = self._conc[key] = float(concurrent_time(self.cluster(*ck).cluster, list(transfers), in_graph=True)[0])
        return t

    def concurrents_first(self, nets: list[int], clusters: list, transfers: tuple) -> np.ndarray:
        """`concurrent_first` on each of `clusters` (as `collectives`), those not memoized timed at once
        (`network.contention.concurrent_times`)."""
        return _memo_many(self._conc_many.setdefault(transfers, {}), nets, clusters,
                          lambda cls: concurrent_times(cls, list(transfers), in_graph=True)[:, 0])

    def _network(self, ck: tuple) -> tuple:
        """What a collective's time on cluster `ck` depends on: the cluster and its calibration's collective factors
        (`Calibration.network`: `network.timing` reads no other), so the settings of the interval that move only
        the chip's factors share their collectives."""
        return (*ck[:3], self.calibrations[ck[3]].network, *ck[4:]) if len(ck) > 3 else ck    # (a part's: its own)

    def comm_times(self, ck: tuple) -> "MemoCommTimes":
        """How the step's comm's pieces time collectives on cluster `ck`: memoized, no records."""
        return self.memo(("comm_times", ck), lambda: MemoCommTimes(self, ck))

    def memo(self, key: tuple, make: Callable[[], Any]) -> Any:
        store = self._memo if key[0] in CELL_MEMO else self._shared
        val = store.get(key)
        if val is None:
            val = store[key] = make()
        return val


class MemoCommTimes(CommTimes):
    """`replay.comm.CommTimes` for an Evaluator: its memoized collectives, no records; the last gradient sends share
    links with the first buckets only with `Evaluator(shared_last_sends=True)`."""

    def __init__(self, pr: Evaluator, ck: tuple):
        super().__init__(pr.cluster(*ck).cluster, keep_records=False)
        self.pr, self.ck = pr, ck
        self.shares_links = pr.shared_last_sends

    def __call__(self, op: str, nbytes: float, group, name: str | None = None, count: float = 0) -> float:
        return self.pr.collective(self.ck, op, nbytes, group)

    def shared(self, transfers: tuple) -> float:
        return self.pr.concurrent_first(self.ck, transfers)


def _chip_alike(a: Calibration, b: Calibration) -> bool:
    """Whether calibrations a and b hold the same objects in every field but `network` (a setting of the collective
    factors alone: `Calibration.with_` copies the others), so `chip.rank_rates`, which reads no collective factor,
    gives both the same rates."""
    return all(map(is_, map(a.__dict__.get, _CHIP_FIELDS), map(b.__dict__.get, _CHIP_FIELDS)))


_CHIP_FIELDS = tuple(f.name for f in fields(Calibration) if f.name != "network")    # what `_chip_alike` compares


def _memo_many(seen: dict[int, float], nets: list[int], clusters: list, time_all) -> np.ndarray:
    """Seconds of one collective on each of `clusters` (network settings `nets`): those in `seen` as kept, the others
    timed at once by `time_all(clusters) -> [n]` (the whole list where none is kept) and kept."""
    if not seen.keys() & nets:       # none kept (each setting's first collective): all timed, no look-up each
        got = np.array(time_all(clusters), dtype=float)      # (a copy: its caller's own)
        seen.update(zip(nets, got.tolist()))
        return got
    out = [seen.get(i) for i in nets]
    miss = [j for j, t in enumerate(out) if t is None]
    if miss:
        got = time_all(clusters if len(miss) == len(clusters) else [clusters[j] for j in miss])
        for j, t in zip(miss, np.asarray(got).tolist()):
            out[j] = seen[nets[j]] = t
    return np.array(out)


class SettingsCommTimes(MemoCommTimes):
    """`MemoCommTimes` of one cluster under several calibrations at once (`cks`: the clusters' keys, which differ
    only in their calibration): every collective's seconds a [settings] array, so the step's comm's pieces run once
    for all the settings of one layout (`layouts.batched_parts.batched_comm`)."""

    def __init__(self, pr: Evaluator, cks: list[tuple]):
        super().__init__(pr, cks[0])
        self.cks = cks
        nets = pr.network_ids(cks)
        first: dict[int, int] = {}          # each distinct network setting's first cluster
        for i, n in enumerate(nets):
            first.setdefault(n, i)
        self.nets = list(first)
        self.clusters = tuple(pr.cluster(*cks[i]).cluster for i in first.values())
        order = {n: j for j, n in enumerate(self.nets)}
        self.back = np.array([order[n] for n in nets]) if len(self.nets) < len(nets) else None

    def _each(self, distinct: np.ndarray) -> np.ndarray:
        return distinct if self.back is None else distinct[self.back]

    def __call__(self, op: str, nbytes: float, group, name: str | None = None, count: float = 0) -> np.ndarray:
        return self._each(self.pr.collectives(self.nets, self.clusters, op, nbytes, group))

    def shared(self, transfers: tuple) -> np.ndarray:
        return self._each(self.pr.concurrents_first(self.nets, self.clusters, transfers))
