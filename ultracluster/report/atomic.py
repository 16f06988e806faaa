"""Bytes or text → a file written atomically (temporary file in the same directory, fsync, os.replace).

A reader sees the old file or the new one, never a mix. Every file the package writes goes through here;
it imports nothing of the package, so the report's frames and writers can both use it without a cycle.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path


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
