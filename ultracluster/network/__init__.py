"""Emulated NeuronLink and EFA: group shapes and collective costs on the virtual clock."""
from .collectives import Group, collective_time, group_of

__all__ = ["Group", "collective_time", "group_of"]
