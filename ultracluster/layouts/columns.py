"""A table as its columns' NumPy arrays: what the fast path (`steps.evaluate`) reads of a pandas DataFrame.

An interval's settings are small tables (one layout under a few tens of calibrations, `layouts.setting_times`)
evaluated twice per run; there, building the pandas DataFrame and reading its columns (about 20 us a read, a
hundred reads per evaluation) cost more than much of the model's own work. `Columns` holds the same arrays a
DataFrame built from them holds, and gives them back as `DataFrame[c].to_numpy()`, `.tolist()` and `.iloc` do, so
the evaluation reads the same values either way (its numbers do not change).
"""
from __future__ import annotations

import numpy as np


def objects(v, n: int) -> np.ndarray:
    """A column of `n` Python objects: the list `v`, or the one value `v` in every row, as a DataFrame holds text
    and None (object dtype)."""
    a = np.empty(n, dtype=object)
    a[:] = v
    return a


class Column:
    """One column: `to_numpy`, `tolist` and `iloc` as a pandas Series of the same NumPy array gives them."""

    __slots__ = ("_a",)

    def __init__(self, a: np.ndarray):
        self._a = a

    def to_numpy(self, dtype=None) -> np.ndarray:
        return self._a if dtype is None or self._a.dtype == np.dtype(dtype) else self._a.astype(dtype)

    def tolist(self) -> list:
        return self._a.tolist()

    @property
    def iloc(self) -> "_Positions":
        return _Positions(self._a)


class _Positions:
    """`Column.iloc`: rows by position."""

    __slots__ = ("_a",)

    def __init__(self, a: np.ndarray):
        self._a = a

    def __getitem__(self, idx) -> Column:
        return Column(self._a[idx])


class Columns:
    """A table of equal-length NumPy arrays by column name (`columns` in order). `one_value`: the columns known to
    hold one value, not a missing one, in every row (`batched_parts.distinct_rows` skips its check of them)."""

    def __init__(self, arrays: dict[str, np.ndarray], one_value: frozenset = frozenset()):
        self._arrays = arrays
        self.columns = tuple(arrays)
        self.one_value = one_value
        self._n = len(next(iter(arrays.values()))) if arrays else 0

    def __len__(self) -> int:
        return self._n

    @property
    def empty(self) -> bool:
        return self._n == 0

    def __getitem__(self, name: str) -> Column:
        return Column(self._arrays[name])

    def reset_index(self, drop: bool = True) -> "Columns":
        """Itself: its rows are numbered by position already."""
        if not drop:
            raise ValueError("Columns has no index to keep")
        return self
