"""Degraded instances (`faults.degraded`): which instances run with fewer EFA NICs or slower NeuronLink,
and the link parameters they run at.

Pure (numpy only). A count of instances is drawn from the scenario seed, keyed by the entry's position, so
the same scenario always degrades the same instances.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

DRAW_KEY = 0x16DE6   # separates this draw from the seed's other streams (jitter, stragglers)


@dataclass(frozen=True)
class DegradedPart:
    """One `faults.degraded` entry, resolved: its instances and the scales of their links.

    Attributes:
        instances: sorted instance ids.
        efa_scale: working EFA NICs / the instance's NICs (1.0: all).
        neuronlink_scale: NeuronLink and UltraServer link bandwidth as a fraction of the cluster's.
    """

    instances: tuple[int, ...]
    efa_scale: float
    neuronlink_scale: float


def degraded_parts(faults, instances: int, nics: int, seed: int) -> tuple[DegradedPart, ...]:
    """The resolved `faults.degraded` entries of a scenario (empty without them).

    Args:
        faults: the scenario's `FaultsSpec`, or None.
        instances: instances in the cluster.
        nics: EFA NICs per instance.
        seed: the scenario seed; entry i with a count draws that many distinct instances, uniformly, from
            the stream keyed (seed, DRAW_KEY, i).
    """
    out = []
    for i, d in enumerate(getattr(faults, "degraded", None) or ()):
        if isinstance(d.instances, int):
            rng = np.random.default_rng([seed, DRAW_KEY, i])
            ids = np.sort(rng.choice(instances, size=min(d.instances, instances), replace=False))
        else:
            ids = np.sort(np.asarray(d.instances, dtype=np.int64))
        out.append(DegradedPart(instances=tuple(int(x) for x in ids),
                                efa_scale=(d.efa_nics / nics) if d.efa_nics else 1.0,
                                neuronlink_scale=d.neuronlink_scale or 1.0))
    return tuple(out)


def degraded_links(links, part: DegradedPart):
    """`Links` of an instance of `part`: EFA x working NICs / NICs, NeuronLink and Z links x the scale
    (latencies unchanged)."""
    return replace(links, efa_bytes_per_s=links.efa_bytes_per_s * part.efa_scale,
                   neuronlink_bytes_per_s_per_chip=links.neuronlink_bytes_per_s_per_chip * part.neuronlink_scale,
                   z_link_bytes_per_s_per_chip=links.z_link_bytes_per_s_per_chip * part.neuronlink_scale)
