"""A scenario → the assumptions its figures rest on that no source publishes, each with its conservative end.

A sweep row's `warnings` name every one that applies to its variant: the FSx burst-credit allowance (AWS
publishes neither the bucket nor the refill: `storage.burst_bucket_s`, `burst_refill`), the device-to-host copy
rate of a checkpoint, the failure detection time, and every catalog value marked assumed for the scenario's
instance type or UltraServer. `sweep --assumptions off` prices each variant with every assumption that has an
argued conservative end at that end (`conservative_sets`): the burst allowance at 0 (never burst); the others
are named and kept (no range is argued for them, or they already sit at the top of theirs). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cluster.catalog import INSTANCES, ULTRASERVERS
from ..scenario import Scenario
from ..storage import TIERS


@dataclass(frozen=True)
class Assumption:
    """One assumption in play: the key or catalog field, the warning, and the scenario override that puts it at
    its conservative end (None: kept by `--assumptions off`)."""

    name: str
    warning: str
    conservative: str | None = None


def _bursts(scenario: Scenario) -> bool:
    st = scenario.storage
    tier = TIERS.get((st.deployment, st.throughput_mbps_per_tib)) if st is not None else None
    return tier is not None and (tier.net_burst_mbps_per_tib > tier.net_mbps_per_tib
                                 or tier.disk_burst_read_mbps_per_tib > tier.disk_read_mbps_per_tib
                                 or tier.disk_burst_write_mbps_per_tib > tier.disk_write_mbps_per_tib)


def assumptions(scenario: Scenario) -> list[Assumption]:
    """Every unpublished assumption the scenario's figures rest on (see the module's text)."""
    out = []
    st, ck, f = scenario.storage, scenario.checkpoint, scenario.faults
    if st is not None and _bursts(scenario) and st.burst_bucket_s > 0:
        out.append(Assumption(
            "storage.burst_bucket_s",
            f"assumed: FSx burst credits of {st.burst_bucket_s:g} s of full burst, refilled at {st.burst_refill:g} "
            f"(storage.burst_bucket_s, burst_refill): AWS publishes neither; --assumptions off prices 0 (never "
            f"burst)", "storage.burst_bucket_s=0"))
    if st is not None and ck is not None:
        out.append(Assumption(
            "checkpoint.d2h_gbps_per_chip",
            f"assumed: checkpoint device-to-host copy at {ck.d2h_gbps_per_chip:g} Gbit/s per chip "
            f"(checkpoint.d2h_gbps_per_chip): no public figure; kept by --assumptions off (no argued range)"))
    if f is not None and f.instance_mtbf_hours:
        out.append(Assumption(
            "faults.detect_minutes",
            f"assumed: a failure is detected in {f.detect_minutes:g} min (faults.detect_minutes): no public "
            f"figure; kept by --assumptions off (no argued range)"))
    spec = INSTANCES[scenario.cluster.instance]
    catalog = [(spec.name, k, v) for k, v in spec.sources.items()]
    if scenario.cluster.ultraserver and scenario.cluster.instance in ULTRASERVERS:
        us = ULTRASERVERS[scenario.cluster.instance]
        catalog += [(us.name, k, v) for k, v in us.sources.items()]
    for owner, key, text in catalog:
        if "assumed" in text:
            out.append(Assumption(f"catalog {owner} {key}", f"assumed: catalog {owner} {key}: {text}; kept by "
                                                            f"--assumptions off"))
    return out


def conservative_sets(scenario: Scenario) -> list[str]:
    """The `--set` overrides that put each of the scenario's assumptions with an argued range at its
    conservative end (`sweep --assumptions off`)."""
    return [a.conservative for a in assumptions(scenario) if a.conservative]
