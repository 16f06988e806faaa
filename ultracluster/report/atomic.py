"""Bytes, text or tables → files written atomically (temporary file in the same directory, fsync, os.replace).

A reader sees the old file or the new one, never a mix. Every file the package writes goes through here;
it imports nothing of the package, so the report's frames (`Report.to_csv`) and its writers (`report.write`)
both use it and neither imports the other.
"""
from __future__ import annotations

import io
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` so that readers see the old file or the new one, never a mix.

    Args:
        path: destination file; its directory must exist.
        data: the full contents.

    Returns:
        The destination path.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:  # "x": never clobber; mode 0o666 & ~umask like a plain open
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` as UTF-8 to `path` atomically (see `atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def write_tables(tables: Iterable[tuple[str, Any]], directory: str | os.PathLike, fmt: str = "csv") -> Path:
    """Write each (name, pandas DataFrame) as `<name>.csv` or `<name>.parquet`, atomically (a report's
    `Report.tables()`: steps, breakdown, memory, collectives, timeline, ranks, stages, shards).

    Args:
        tables: (name, frame) pairs.
        directory: created with its parents when missing.
        fmt: "csv" or "parquet".

    Returns:
        The directory.

    Raises:
        RuntimeError: Parquet without pyarrow installed.
        ValueError: another format.
    """
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"table format {fmt!r}: 'csv' or 'parquet'")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401  (optional extra)
        except ImportError:
            raise RuntimeError("to_parquet needs pyarrow: pip install 'ultracluster[parquet]'") from None
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables:
        if fmt == "csv":
            atomic_write_text(out / f"{name}.csv", frame.to_csv(index=False))
        else:
            buf = io.BytesIO()
            frame.to_parquet(buf, index=False)
            atomic_write_bytes(out / f"{name}.parquet", buf.getvalue())
    return out
