"""What the caches hand out is read-only: writing into a cached array raises instead of changing what the next
caller gets (`ultracluster.frozen.read_only`)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ultracluster.frozen import read_only


def _arrays(value):
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _arrays(item)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _arrays(getattr(value, f.name))


def _cached_values():
    from ultracluster.layouts import batched_parts, programs

    yield "program_arrays", programs.program_arrays("1f1b", 4, 8, 1)
    yield "compile_programs", programs.compile_programs("interleaved", 4, 8, 2)
    yield "repeats", programs.repeats("1f1b", 4, 8, 1)
    yield "_held", batched_parts._held("1f1b", 4, 8, 1)
    from ultracluster import uncertainty

    yield "halton", uncertainty.halton(16, 3)
    yield "_uniform", uncertainty._uniform()


def test_read_only_reaches_every_array_inside():
    @dataclasses.dataclass(frozen=True)
    class Box:
        a: np.ndarray
        rest: tuple

    box = read_only(Box(np.zeros(3), (np.ones(2), [np.arange(4)], slice(0, 2), 7, {"x": {"y": np.ones(3)}})))
    for arr in (box.a, box.rest[0], box.rest[1][0], box.rest[4]["x"]["y"]):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 5


@pytest.mark.parametrize("name, value", list(_cached_values()))
def test_the_cached_arrays_are_read_only(name, value):
    arrays = list(_arrays(value))
    assert arrays, name
    for arr in arrays:
        if arr.size:
            before = arr.copy()
            with pytest.raises(ValueError, match="read-only"):
                arr.flat[0] = arr.flat[0] + 1
            np.testing.assert_array_equal(arr, before)


def test_a_collective_profile_is_read_only():
    from ultracluster.network import Group
    from ultracluster.network.bench import bench_cluster
    from ultracluster.network.collectives import members_and_levels, link_loads
    from ultracluster.network.topology import fabric

    fab = fabric(bench_cluster("trn2.48xlarge", 2))
    g = Group(64, 2, together=False)
    arrays = list(_arrays(members_and_levels(fab, g))) + list(_arrays(link_loads(fab, "all_reduce", 1 << 30, g)))
    assert len(arrays) > 3
    for arr in arrays:
        with pytest.raises(ValueError, match="read-only"):
            arr.flat[0] = arr.flat[0]


def test_kept_makes_once_and_a_full_store_starts_again():
    from ultracluster.frozen import kept

    store, made = {}, []
    make = lambda k: (lambda: made.append(k) or k * 10)      # noqa: E731
    assert [kept(store, k, make(k), limit=2) for k in (1, 1, 2)] == [10, 10, 20] and made == [1, 2]
    assert kept(store, 3, make(3), limit=2) == 30 and store == {3: 30}       # at its limit: emptied, then 3 kept
