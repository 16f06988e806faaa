"""Collective op + bytes + group → virtual seconds, the algorithm Neuron would pick, and the link loads.

How a collective is costed (docs/sources.md §3.4-3.8, §5.3):

1. **Members.** The group's ranks are placed by `topology.locate`. With ``Group.together`` (the default)
   every group of the same shape on the same instances runs at once (all TP groups of an instance, all DP
   groups of an instance), so their flows share chips, NeuronLink ports and NICs.
2. **Tiers.** Members split into the ranks of one instance (NeuronLink), the instances of one UltraServer
   (Z rings) and the UltraServers or instances (EFA). A collective spanning several tiers is hierarchical
   (H12): reduce-scatter goes up the tiers, the top tier all-reduces 1/(inner members) of the buffer,
   all-gather comes back down; an all-gather runs the outer tier first.
3. **Algorithm per tier, chosen as Neuron's runtime chooses** (H11, H12): inside an instance Mesh below
   1 MiB, RDH up to 56 MiB (power-of-two groups), KangaRing above (groups holding every rank of their
   chips), Ring otherwise; across instances Mesh for small messages on small groups, RDH for power-of-two
   groups up to 56 MiB (or large groups), Ring for large messages on small groups.
4. **Steps.** Each algorithm is a list of steps (`algorithms.patterns`); a step's flows are routed over the
   fabric (`topology.route`). A step moves its bytes in ``b = max over resources(bytes / achieved
   bandwidth)`` and pays the longest flow's wire latency plus a fixed cost (`reduce_step_s` for a
   reducing step inside an instance, `efa_step_s` for every step of a collective spanning EFA). Steps run
   one after the other, except that ring steps pipeline: each later ring step costs
   ``max(b, latency + fixed cost)``. A collective adds a launch cost.

`concurrent_time` costs several collectives or sends that run at the same time on shared links (max-min
fair fluid sharing of every chip, port and NIC); `collective_time` keeps the engine's
`(seconds, algorithm)` interface.

One module per job; this one gathers their names (`from ultracluster.network.collectives import X` works
for all of them):

* `groups`: `Group`, `group_of`, `bus_factor`.
* `selection`: members and tiers (1, 2), Neuron's algorithm choice and the hierarchical stages (3).
* `flows`: stages → flows over the fabric → per-step link loads → a collective's `LinkLoads` (4).
* `timing`: the vectorized step table, launch costs, the size-switch envelope or monotone floor,
  `collective_cost` and `collective_time`.
* `contention`: `concurrent_time` (max-min fair sharing, `ultracluster.fairshare`) and the bus-bandwidth
  ceiling `busbw_limit_bytes_per_s`.
"""
from __future__ import annotations

from .contention import (  # noqa: F401
    busbw_limit_bytes_per_s, concurrent_time,
)
from .flows import (  # noqa: F401
    Flows, LinkLoads, RING_CHANNELS, StepLoad, kangaring_flows, step_load, stage_link_loads, ring_order, stage_flows,
    switch_ring_order, unit_flows, members_and_levels, link_loads,
)
from .groups import (  # noqa: F401
    Group, bus_factor, group_of,
)
from .timing import (  # noqa: F401
    IN_GRAPH_LAUNCH_MAX_S, StepTable, breakpoints, check_collective, collective_cost, collective_time, placed_alike,
    step_table, table_times,
)
from .selection import (  # noqa: F401
    A2A_MESH_MAX_MEMBERS, EFA_MESH_MAX_MEMBERS, EFA_RING_MAX_MEMBERS, Levels, MESH_MAX_BYTES, MIB, RDH_MAX_BYTES,
    Stage, chips_of, switch_ring, algorithm_name, family, levels, pick_inter, pick_intra, stages,
)
