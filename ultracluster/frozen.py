"""What a cache hands out: read-only numpy arrays (a cached value is shared by every caller, so writing into one
of its arrays would change what the next caller gets: `read_only`), a bounded store (`kept`), a cheap copy of a
frozen dataclass (`replaced`)."""
from __future__ import annotations

import dataclasses
from typing import TypeVar

import numpy as np

T = TypeVar("T")


def read_only(value: T) -> T:
    """`value` with every numpy array in it made read-only (`flags.writeable = False`), in place: an array, or a
    tuple, list, dict (its values) or dataclass of them (nested; a slice or index inside a tuple is left as is).
    Returns `value`."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, (tuple, list, dict)):
        for item in (value.values() if isinstance(value, dict) else value):
            read_only(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            read_only(getattr(value, f.name))
    return value


def kept(store: dict, key, make, limit: int = 1 << 16):
    """`store[key]`, made by `make()` the first time; a store at `limit` entries starts again empty (every bounded
    cache of the project). An entry keyed by objects' identities holds those objects, so an identity is not reused
    while it is there."""
    hit = store.get(key)
    if hit is None:
        if len(store) >= limit:
            store.clear()
        hit = store[key] = make()
    return hit


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
