"""`df.uc`: derived metrics on the Report's DataFrames (pandas `register_dataframe_accessor`).

Importing `ultracluster.report` registers it. Each method needs only the columns it names, so it works
on the frames of a Report, on frames read back from a run directory's CSV files, and on slices of them:

    report.breakdown.uc.measured().uc.shares()     # share of the step per part, warm-up dropped
    report.steps.uc.to_ms()                         # every `_s` column as `_ms`
    report.ranks.uc.stragglers(1.1)                 # ranks at least 10 % slower than their stage's median
"""
from __future__ import annotations

import pandas as pd

from ultracluster.replay.result import BREAKDOWN_KEYS

COMM_PARTS = ("tp_comm_s", "pp_comm_s", "dp_comm_s")


@pd.api.extensions.register_dataframe_accessor("uc")
class UltraclusterAccessor:
    """Derived metrics for ultracluster frames (see the module docstring)."""

    def __init__(self, frame: pd.DataFrame):
        self._df = frame

    def _need(self, *columns: str) -> None:
        missing = [c for c in columns if c not in self._df.columns]
        if missing:
            raise AttributeError(f"df.uc needs the column(s) {', '.join(missing)}; this frame has "
                                 f"{', '.join(map(str, self._df.columns)) or 'none'}")

    def measured(self) -> pd.DataFrame:
        """The rows of measured steps (`warmup` False); every row when all of them are warm-up."""
        self._need("warmup")
        keep = ~self._df["warmup"].astype(bool)
        return self._df[keep] if keep.any() else self._df

    def shares(self) -> pd.DataFrame:
        """Each breakdown part as a fraction of its row's `step_time_s`, as `<part>_frac` columns (they add
        up to 1), with `step` kept when present."""
        self._need("step_time_s", *BREAKDOWN_KEYS)
        out = self._df[list(BREAKDOWN_KEYS)].div(self._df["step_time_s"], axis=0)
        out.columns = [c.removesuffix("_s") + "_frac" for c in BREAKDOWN_KEYS]
        return pd.concat([self._df[["step"]], out], axis=1) if "step" in self._df.columns else out

    @property
    def comm_s(self) -> pd.Series:
        """Exposed communication per row, in s: `exposed_comm_s` when the frame has it, else the sum of
        the breakdown's tp, pp and dp parts."""
        if "exposed_comm_s" in self._df.columns:
            return self._df["exposed_comm_s"].rename("comm_s")
        self._need(*COMM_PARTS)
        return self._df[list(COMM_PARTS)].sum(axis=1).rename("comm_s")

    def to_ms(self) -> pd.DataFrame:
        """A copy with every seconds column (`*_s`) in milliseconds, renamed `*_ms`."""
        secs = [c for c in self._df.columns if isinstance(c, str) and c.endswith("_s")]
        out = self._df.copy()
        out[secs] = out[secs] * 1e3
        return out.rename(columns={c: c[:-2] + "_ms" for c in secs})

    def stragglers(self, slowdown: float = 1.05) -> pd.DataFrame:
        """Rows of the per-rank table whose compute is at least `slowdown` times their stage's median,
        slowest first."""
        self._need("slowdown")
        return self._df[self._df["slowdown"] >= slowdown].sort_values("slowdown", ascending=False, kind="stable")

    def busy_frac(self) -> pd.Series:
        """Per rank (or stage, using its slowest rank), the fraction of the compute-comm-idle time spent
        computing: compute_s / (compute_s + exposed_comm_s + idle_s)."""
        if {"compute_s", "exposed_comm_s", "idle_s"} <= set(self._df.columns):
            c, e, i = self._df["compute_s"], self._df["exposed_comm_s"], self._df["idle_s"]
        else:
            self._need("compute_max_s", "exposed_comm_s", "idle_min_s")
            c, e, i = self._df["compute_max_s"], self._df["exposed_comm_s"], self._df["idle_min_s"]
        return (c / (c + e + i)).rename("busy_frac")
