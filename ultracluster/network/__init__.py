"""Emulated NeuronLink and EFA: topology and rank placement, Neuron's collective algorithms, link sharing.

Public surface:

- `collective_time(cluster, op, nbytes, group) -> (seconds, algorithm)` and `group_of(cluster, size, stride)`
  (used by the replay engine); `Group(per_instance, instances, stride=0, together=True)`.
- `concurrent_time(cluster, [(op, nbytes, group), ...]) -> seconds per transfer` when they share links.
- `collective_cost` (bandwidth and latency parts, link loads), `bus_factor`, `busbw_limit_bytes_per_s`;
  `placed_alike(cluster, group)`: groups placed alike cost the same (time one of them).
- `placement_records(cluster, max_rows)`: where ranks sit (instance, chip, x, y, z) and their groups.
- `algorithms.schedule(...)`: each algorithm's steps as data (also drives the actors' payload exchange).
"""
from .calibration import NetworkCalibration
from .collectives import (Group, bus_factor, busbw_limit_bytes_per_s, collective_cost, collective_time,
                          concurrent_time, group_of, placed_alike)
from .topology import placement_records

__all__ = ["Group", "NetworkCalibration", "bus_factor", "busbw_limit_bytes_per_s", "collective_cost",
           "collective_time", "concurrent_time", "group_of", "placed_alike", "placement_records"]
