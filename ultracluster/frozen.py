"""Read-only numpy arrays for what a cache hands out: a cached value is shared by every caller, so writing into
one of its arrays would change what the next caller gets (`read_only`)."""
from __future__ import annotations

import dataclasses
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def read_only(value: T) -> T:
    """`value` with every numpy array in it made read-only (`flags.writeable = False`), in place: an array, or a
    tuple, list or dataclass of them (nested; a slice or index inside a tuple is left as is). Returns `value`."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, (tuple, list)):
        for item in value:
            read_only(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            read_only(getattr(value, f.name))
    return value


def replaced(obj: T, changes: dict, drop: tuple = ()) -> T:
    """`dataclasses.replace(obj, **changes)` of a dataclass whose `__init__` only sets its fields (no `__post_init__`,
    every field in `__init__`): a copy of its dict with `changes` set and the attributes `drop` left out, the same
    instance at a fraction of the cost (an interval's settings make a few hundred: calibrations and clusters).
    `changes` are not checked against the fields: the caller does that where a name may be wrong."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    for k in drop:
        new.__dict__.pop(k, None)
    return new
