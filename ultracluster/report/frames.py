"""RunResult → Report: tidy pandas DataFrames (snake_case, unit-suffixed columns) plus the summary dict.

Collective bandwidths follow nccl-tests (doc/PERFORMANCE.md): `algbw_gb_s = bytes / time_s / 1e9` and
`busbw_gb_s = algbw_gb_s x factor`, where factor is 2(n-1)/n for all_reduce, (n-1)/n for reduce_scatter,
all_gather and all_to_all, 1 for send_recv. `bytes` is CollectiveRecord.bytes, the per-rank buffer in the
nccom-test convention, which is nccl-tests' S: the whole buffer for all_reduce, the full (pre-scatter) input
for reduce_scatter and the full (gathered) output for all_gather — not the 1/n shard, so it is not
multiplied by the group size.
"""
from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pandas as pd

from ultracluster.replay.events import (
    BREAKDOWN_KEYS, CollectiveRecord, RunResult, Slice, StageMemory, StepRecord,
)
from ultracluster.report.summary import emulation_info, summarize
from ultracluster.report.write import atomic_write_bytes, atomic_write_text

_DTYPES = {"int": "int64", "float": "float64", "bool": "bool", "str": "str"}
TABLES = ("steps", "breakdown", "memory", "collectives", "timeline")


def records_frame(records: list, cls: type) -> pd.DataFrame:
    """One row per dataclass record, one typed column per field; an empty list still gives the columns."""
    cols = [f.name for f in fields(cls)]
    frame = pd.DataFrame([[getattr(r, c) for c in cols] for r in records], columns=cols)
    return frame.astype({f.name: _DTYPES[f.type] for f in fields(cls)})


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests bus-bandwidth factor for one collective over `ranks` participants (NaN for unknown ops)."""
    ring = (ranks - 1) / ranks if ranks else float("nan")
    return {"all_reduce": 2 * ring, "reduce_scatter": ring, "all_gather": ring, "all_to_all": ring,
            "send_recv": 1.0}.get(op, float("nan"))


def collectives_frame(records: list[CollectiveRecord]) -> pd.DataFrame:
    """CollectiveRecord rows plus `time_us`, `time_per_step_s`, `algbw_gb_s` and `busbw_gb_s` (10^9 B/s)."""
    df = records_frame(records, CollectiveRecord)
    df["time_us"] = df["time_s"] * 1e6
    df["time_per_step_s"] = df["time_s"] * df["count_per_step"]
    df["algbw_gb_s"] = df["bytes"] / df["time_s"] / 1e9
    df["busbw_gb_s"] = df["algbw_gb_s"] * [bus_factor(o, n) for o, n in zip(df["op"], df["ranks"])]
    return df.astype({"algbw_gb_s": "float64", "busbw_gb_s": "float64"})


class Report:
    """One run as pandas tables.

    Attributes:
        steps: one row per replayed step, every StepRecord field (times in s, payload in bytes).
        breakdown: `step`, `warmup`, the eight critical-path parts in s and `step_time_s`.
        memory: HBM footprint of one rank per pipeline stage, in GiB.
        collectives: one row per costed collective kind (see the module docstring for bandwidths).
        timeline: Slice rows of the critical replica plus `duration_s`.
        summary: the summary.json dict.
        scenario: the resolved scenario dict.
        shard_instances: per actor shard, its [first, last] instance index.
        emulation: how the run was emulated (actors, wall seconds, payload bytes): run.json.
    """

    def __init__(self, steps: pd.DataFrame, breakdown: pd.DataFrame, memory: pd.DataFrame,
                 collectives: pd.DataFrame, timeline: pd.DataFrame, summary: dict, scenario: dict,
                 shard_instances: list[tuple[int, int]] | None = None, emulation: dict | None = None):
        self.steps, self.breakdown, self.memory = steps, breakdown, memory
        self.collectives, self.timeline = collectives, timeline
        self.summary, self.scenario = summary, scenario
        self.shard_instances = list(shard_instances or [])
        self.emulation = dict(emulation or {})

    def __repr__(self) -> str:
        return f"Report({self.summary.get('scenario')!r}, steps={len(self.steps)})"

    def _tables(self) -> Iterator[tuple[str, pd.DataFrame]]:
        return ((name, getattr(self, name)) for name in TABLES)

    def to_csv(self, directory: str | os.PathLike) -> Path:
        """Write steps, breakdown, memory, collectives and timeline as `<name>.csv`, atomically.

        Args:
            directory: created with its parents when missing.

        Returns:
            The directory.
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for name, frame in self._tables():
            atomic_write_text(out / f"{name}.csv", frame.to_csv(index=False))
        return out

    def to_parquet(self, directory: str | os.PathLike) -> Path:
        """Write the same tables as `<name>.parquet`, atomically.

        Args:
            directory: created with its parents when missing.

        Returns:
            The directory.

        Raises:
            RuntimeError: pyarrow is not installed.
        """
        try:
            import pyarrow  # noqa: F401  (optional extra)
        except ImportError:
            raise RuntimeError("to_parquet needs pyarrow: pip install 'ultracluster[parquet]'") from None
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for name, frame in self._tables():
            buf = io.BytesIO()
            frame.to_parquet(buf, index=False)
            atomic_write_bytes(out / f"{name}.parquet", buf.getvalue())
        return out


def build_report(result: RunResult) -> Report:
    """Turn a replayed run into a Report.

    Args:
        result: everything the replay produced.

    Returns:
        The Report; every table has its columns even when the run produced no rows.
    """
    steps = records_frame(result.steps, StepRecord)
    timeline = records_frame(result.slices, Slice)
    timeline["duration_s"] = timeline["end_s"] - timeline["start_s"]
    return Report(
        steps=steps,
        breakdown=steps[["step", "warmup", *BREAKDOWN_KEYS, "step_time_s"]].copy(),
        memory=records_frame(result.memory, StageMemory),
        collectives=collectives_frame(result.collectives),
        timeline=timeline,
        summary=summarize(result),
        scenario=result.scenario,
        shard_instances=result.shard_instances,
        emulation=emulation_info(result),
    )
