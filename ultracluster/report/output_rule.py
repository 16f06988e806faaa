"""The output rule: the one check every command that writes makes on its paths, before it starts anything.

* An existing file, or a directory holding an earlier output of the command, is replaced only with ``--force``.
* Never a device, a FIFO, a socket; never the command's own input, nor a directory holding it; never a directory
  holding files the command does not write (the user's), whatever the flags.
* Never a symlink at a file's path (written through, it could land anywhere; replaced, it is the user's link).
  Every file is written atomically (`report.atomic`): a new file renamed over the path.
* The path's directory must exist or be creatable.

`check_out_file` is the rule for a file (calibrate's profile and its page, ``collectives --csv``, ``compare --out
PAGE.html``), `check_out_dir` for a directory a command writes its files into (plan, sweep, sensitivity, compare;
a run directory, replaced whole, is `rundir.RunDirectory`'s, which applies the same rule). Every refusal is an
``OutDirError`` naming the path: the CLI prints it on one line and exits 2. Imports nothing of the package but
its errors.
"""
from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import Callable

from ultracluster.errors import OutDirError, shorten_text

TEMP_FILE = re.compile(r"^\..+\.tmp$")            # atomic_write's temporary file, left by a kill


def _stamp(path: Path) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.lstat().st_mtime))
    except OSError:
        return "?"


def special_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a directory is: a device, a FIFO, a socket."""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "not a regular file"


def _real(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def input_clash(shown_flag: str, shown: str, target: Path, inputs) -> None:
    """OutDirError when `target` (resolved) is, or holds, one of the command's own input files."""
    for given in inputs or ():
        if not given:
            continue
        src = _real(given)
        if _within(src, target):
            how = "is" if src == target else "holds"
            raise OutDirError(f"{shown_flag} {shown}: it {how} this command's own input "
                              f"({shorten_text(os.fspath(given))}); a command never writes over what it reads: give "
                              f"another path")


def _creatable(flag: str, shown: str, directory: Path) -> None:
    """OutDirError unless `directory` exists as a directory or can be created (its nearest existing ancestor a
    writable directory)."""
    probe = directory
    while not os.path.lexists(probe):
        if probe.parent == probe:
            break
        probe = probe.parent
    try:
        mode = os.stat(probe).st_mode
    except OSError as err:
        raise OutDirError(f"{flag} {shown}: cannot create it ({shorten_text(str(probe))}: "
                          f"{err.strerror or err})") from None
    if not stat.S_ISDIR(mode):
        raise OutDirError(f"{flag} {shown}: cannot create it: {shorten_text(str(probe))} is "
                          f"{special_kind(mode) or 'a file'}, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutDirError(f"{flag} {shown}: cannot create it: {shorten_text(str(probe))} is not writable "
                          f"(permission denied)")


def owns_files(names) -> Callable[[Path], bool]:
    """`check_out_dir`'s `owns` for a command that writes the files `names` (and atomic_write's temporary files):
    an entry of one of those names that is not a regular file (a directory, a FIFO, a device, a socket) or is a
    symlink (written through, it could land anywhere) is not one of them."""
    names = frozenset(names)
    return lambda entry: bool(TEMP_FILE.match(entry.name)) or (entry.name in names and is_regular(entry))


def is_regular(entry: Path) -> bool:
    """Whether `entry` is a regular file itself (not a symlink to one, a FIFO, a device, a socket, a directory)."""
    try:
        return stat.S_ISREG(entry.lstat().st_mode)
    except OSError:
        return False


def entry_shown(entry: Path) -> str:
    """An entry of a directory as a refusal lists it: ``name/`` for a directory, ``name (a FIFO (named pipe))``
    for what is neither a file nor a directory, ``name (a symlink)``."""
    try:
        mode = entry.lstat().st_mode
    except OSError:
        return entry.name
    if stat.S_ISLNK(mode):
        return f"{entry.name} (a symlink)"
    if stat.S_ISDIR(mode):
        return entry.name + "/"
    kind = special_kind(mode)
    return f"{entry.name} ({kind})" if kind else entry.name


def check_out_file(path: str | os.PathLike, force: bool, flag: str = "--out", inputs=()) -> Path:
    """The output rule for a file a command writes (calibrate's profile and the page beside it, `collectives
    --csv`, `compare --out PAGE.html`): never a device, a FIFO, a socket or a directory; never the command's own
    input; never a symlink; an existing file only with `force`; its directory must exist or be creatable.

    Returns:
        The path as given (a Path).

    Raises:
        OutDirError: naming the flag and the path (the CLI prints it on one line and exits 2).
    """
    p = Path(path)
    shown = shorten_text(os.fspath(path))
    if not os.fspath(path) or p.name in ("", ".", ".."):
        raise OutDirError(f"{flag} {shown!r}: not a file name; give a file path")
    real = _real(p)
    input_clash(flag, shown, real, inputs)
    try:
        mode = os.stat(p).st_mode              # what a symlink points to, too: /dev/stdout is a pipe or a tty
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise OutDirError(f"{flag} {shown}: cannot write it ({err.strerror or err})") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutDirError(f"{flag} {shown}: it is a directory; give a file path")
    if mode is not None and special_kind(mode):
        raise OutDirError(f"{flag} {shown}: it is {special_kind(mode)}, not a regular file; a command writes only "
                          f"regular files: give a file path")
    if p.is_symlink():
        raise OutDirError(f"{flag} {shown}: it is a symlink (to {shorten_text(os.readlink(p), 100)}); a command "
                          f"never writes through a symlink nor replaces one: give the real path")
    if os.path.lexists(p) and not force:
        raise OutDirError(f"{flag} {shown}: a file already exists there (written {_stamp(p)}); it is never "
                          f"replaced silently: add --force to replace it, or give another path")
    _creatable(flag, shown, p.parent)
    return p


def check_out_dir(path: str | os.PathLike, force: bool, owns, earlier, what: str, writer: str,
                  inputs=(), flag: str = "--out") -> bool:
    """The output rule for a directory a command writes its files into (plan, sweep, compare, sensitivity; `run`
    through `RunDirectory`): never a file, a device or a FIFO; never one that holds, or is, the command's own
    input; never one holding entries the command does not write (`owns(entry)` False: the user's files, whatever
    the flags); one holding an earlier output (`earlier(directory)`: a description, or None) only with `force`.

    Returns:
        Whether an earlier output is there (and `force` replaces it).

    Raises:
        OutDirError: naming the directory (exit 2, one line).
    """
    shown = shorten_text(os.fspath(path))
    p = Path(path)
    target = _real(p)
    if target.parent == target:
        raise OutDirError(f"{what} {shown}: cannot be the file system root")
    input_clash(f"{what}", shown, target, inputs)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        _creatable(what, shown, p)
        return False
    except OSError as err:
        raise OutDirError(f"{what} {shown}: cannot use it ({err.strerror or err})") from None
    if not stat.S_ISDIR(mode):
        raise OutDirError(f"{what} {shown}: it is {special_kind(mode) or 'a file'}, not a directory; give {flag} "
                          f"NEWDIR")
    try:
        entries = sorted(target.iterdir())
    except OSError as err:
        raise OutDirError(f"{what} {shown}: cannot list it ({err.strerror or err})") from None
    foreign = [entry_shown(e) for e in entries if not owns(e)]
    if foreign:
        listed = ", ".join(shorten_text(f, 60) for f in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise OutDirError(f"{what} {shown}: it holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} "
                          f"{writer} does not write ({listed}); {writer} never writes among other files, whatever "
                          f"the flags: choose an empty or new directory")
    found = earlier(target)
    if found and not force:
        raise OutDirError(f"{what} {shown} already holds {found}; it is never replaced silently: add --force to "
                          f"replace it, or give {flag} NEWDIR")
    if not os.access(target, os.W_OK | os.X_OK):
        raise OutDirError(f"{what} {shown}: not writable (permission denied)")
    return bool(found)


