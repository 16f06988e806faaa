"""One run → one run directory: locked while the run writes, written beside it, moved into place whole.

For a run directory ``<parent>/<name>``:

* ``<parent>/.<name>.lock`` is the lock: a file held with ``flock`` by the process writing ``<name>`` and
  holding its pid, host, start time and staging directory (JSON). A second run into ``<name>`` finds it
  held and stops with ``OutDirError`` naming the holder. A lock whose process died (SIGKILL, a lost node)
  is held by nobody: the next run takes it over, removes the dead run's staging directory and says so.
* ``<parent>/.<name>.partial-<pid>-<hex>`` is the staging directory the run writes into: steps.csv as
  steps finish, then the tables, report.html and summary.json.
* When the run ends, the staging directory replaces ``<name>`` as a whole (an atomic exchange where the file
  system offers one, else two renames), so ``<name>`` always holds the files of exactly one run: a finished
  one (with summary.json) or an interrupted or failed one (steps.csv with the finished steps, run.json with
  ``finished: false``, the signal or the error, and never a summary.json). A run that ends before it wrote
  anything (bad input, interrupted before its first step) leaves ``<name>`` as it was, and so does one that
  does not finish where ``<name>`` holds a finished run: a finished run is replaced by a finished one only.
* An existing ``<name>`` is replaced only when it holds nothing but files a run writes (``*.csv``,
  ``*.json``, ``*.html``, ``*.parquet``): never a directory with subdirectories or other files, never the
  current directory or one above it. One that holds an earlier run (its summary.json, steps.csv or run.json) is
  replaced only when asked to (``force``; the CLI's ``run --force``, the same rule as ``plan --force``).

Only this module and ``write.py`` create files in run directories.

``RunDirectory`` applies the output rule (`output_rule`) to a run directory: never a device, a file, the run's
own input or a directory holding it.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

from ultracluster.errors import OutDirError, RunInterrupted, shorten_text
from ultracluster.report.output_rule import entry_shown, input_clash, special_kind
from ultracluster.report.write import StepWriter, write_run_record
from ultracluster.yaml_input import InputError, load_json

RUN_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.(csv|json|html|parquet)$|^\..+\.tmp$")
_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


EARLIER_RUN_FILES = ("summary.json", "steps.csv", "run.json")   # what marks a directory as holding a run


def earlier_run(path: Path) -> str:
    """A few words on the run a directory holds: its scenario, when it was written, whether it finished."""
    summary, record = path / "summary.json", path / "run.json"
    stamp = next((f.stat().st_mtime for f in (summary, record, path / "steps.csv") if f.is_file()), None)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(stamp)) if stamp is not None else "?"
    try:
        s = load_json(summary.read_bytes(), str(summary)) if summary.is_file() and summary.stat().st_size < 1 << 22 \
            else None
    except (OSError, ValueError, InputError):
        s = None
    if isinstance(s, dict):
        what = f"scenario {shorten_text(str(s.get('scenario', '?')), 80)}, " + (
            "feasible" if s.get("feasible") else "infeasible")
        return f"{what}, written {when}"
    return f"an unfinished run, written {when}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process
        return True
    return True


def _place(out: str | os.PathLike) -> Path:
    """The directory a run would write, symlinks resolved, so that every spelling of it shares one lock."""
    target = Path(os.path.realpath(os.fspath(out)))
    if target.parent == target:
        raise OutDirError(f"run directory {shorten_text(os.fspath(out))}: cannot be the file system root")
    return target


class RunDirLock:
    """The lock of one run directory (``<parent>/.<name>.lock``), taken on enter, dropped on exit.

    Args:
        out: the run directory (it need not exist; its parent must).
        staging: the staging directory's name, recorded for whoever finds the lock stale.
        what: what the directory is, in messages ("run directory", "sweep directory").

    Attributes:
        stale: the record of a dead holder whose lock this one replaced, else None.

    Raises:
        OutDirError: another live process holds it (naming its pid and host), or it cannot be created.
    """

    def __init__(self, out: str | os.PathLike, staging: str = "", what: str = "run directory") -> None:
        self.out = os.fspath(out)
        self.what = what
        self.target = _place(out)
        self.path = self.target.parent / f".{self.target.name}.lock"
        self.record = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": _now(),
                       "staging": staging, "command": shorten_text(" ".join(sys.argv), 300)}
        self.stale: dict | None = None
        self._fd: int | None = None

    def __enter__(self) -> RunDirLock:
        try:
            while self._fd is None:
                # never through a symlink (a planted .NAME.lock -> /etc/passwd would be truncated), never a FIFO
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o644)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        raise OSError(errno.EINVAL, f"it is {special_kind(os.fstat(fd).st_mode) or 'a directory'}, "
                                                    "not a lock file")
                    if self._take(fd):
                        self._fd = fd
                except BaseException:
                    os.close(fd)
                    raise
                if self._fd is None:
                    os.close(fd)
        except OSError as err:
            why = "it is a symlink" if err.errno == errno.ELOOP else (err.strerror or str(err))
            raise OutDirError(f"{self.what} {shorten_text(self.out)}: cannot lock it with "
                              f"{shorten_text(str(self.path))} ({why})") from None
        return self

    def _take(self, fd: int) -> bool:
        """Lock `fd`; False when the file was removed meanwhile (try again), an error when it is held."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shared = True
        except BlockingIOError:
            raise self._busy(self._read(fd)) from None
        except OSError as err:   # a file system without flock: fall back to the pid in the file
            if err.errno not in _UNSUPPORTED:
                raise
            shared = False
        try:
            if os.stat(self.path).st_ino != os.fstat(fd).st_ino:
                return False                 # its holder removed it as we opened it: take the new one
        except FileNotFoundError:
            return False
        held = self._read(fd)
        if held:
            same_host = held.get("host") == self.record["host"]
            if not shared and not (same_host and isinstance(held.get("pid"), int) and not _alive(held["pid"])):
                raise self._busy(held)
            self.stale = held
        data = (json.dumps(self.record) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        return True

    def _read(self, fd: int) -> dict:
        try:
            held = load_json(os.pread(fd, 65536, 0) or b"{}", "lock file")
        except (ValueError, InputError):
            return {"pid": "?", "host": "?"}
        return held if isinstance(held, dict) else {"pid": "?", "host": "?"}

    def _busy(self, held: dict) -> OutDirError:
        return OutDirError(
            f"{self.what} {shorten_text(self.out)} is in use by pid {shorten_text(held.get('pid', '?'), 20)} on "
            f"host {shorten_text(held.get('host', '?'), 100)} (since {shorten_text(held.get('started_at', '?'), 40)}; lock "
            f"{shorten_text(str(self.path))}): wait for that run to end or stop it, or choose another --out")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._fd is not None:
            try:
                self.path.unlink()       # while still held: a waiter that opened it sees it gone and retries
            except FileNotFoundError:
                pass
            os.close(self._fd)
            self._fd = None


class RunDirectory:
    """The run directory a run writes: locked, staged beside it, moved into place whole when the run ends.

    Use as a context manager around the run; write into ``path``; append finished steps to ``steps``.

    Args:
        out: the run directory.
        force: replace an earlier run found there (False: OutDirError naming it, as `run` without --force).
        inputs: the files the run reads (its scenario, its calibration profile): never inside the directory.

    Attributes:
        target: the run directory (symlinks resolved).
        path: the staging directory to write into (beside ``target``, on the same file system).
        steps: the StepWriter of ``path``/steps.csv.
        stale: the record of a dead run whose lock was taken over (its staging directory removed), or None.
        kept_earlier: after exit, when this run did not finish and the directory held a finished run: that
            run's description (it was kept, and this run's files were dropped), else None.

    Raises:
        OutDirError: on enter, when another run holds the directory, it is a file, it holds files no run
            writes, it is the current directory or holds it, or (without `force`) it holds an earlier run.
    """

    def __init__(self, out: str | os.PathLike, force: bool = True, inputs=()) -> None:
        self.out = os.fspath(out)
        self.force = force
        self.inputs = tuple(inputs)
        self.kept_earlier: str | None = None
        self.target = _place(out)
        token = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.path = self.target.parent / f".{self.target.name}.partial-{token}"
        self.lock = RunDirLock(out, self.path.name)
        self.steps = StepWriter(self.path)
        self.stale: dict | None = None
        self._started = _now()

    def __enter__(self) -> RunDirectory:
        self._check_target()
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutDirError(f"run directory {shorten_text(self.out)}: cannot create "
                              f"{shorten_text(str(self.target.parent))} ({err.strerror or err})") from None
        self.lock.__enter__()
        try:
            self.stale = self.lock.stale
            if self.stale:
                self._clean_after(self.stale)
            self._check_target()       # again, under the lock
            self.path.mkdir()
        except BaseException:
            self.lock.__exit__(None, None, None)
            raise
        return self

    def _check_target(self) -> None:
        shown = shorten_text(self.out)
        try:
            cwd = Path.cwd().resolve()
        except OSError:        # the current directory was removed: it cannot be the target
            cwd = None
        if cwd is not None and (self.target == cwd or self.target in cwd.parents):
            raise OutDirError(f"run directory {shown}: it is the current directory or holds it; a run replaces "
                              f"its directory as a whole, so choose one below it (e.g. runs/NAME)")
        input_clash("run directory", shown, self.target, self.inputs)
        if self.target.exists() and not self.target.is_dir():
            kind = special_kind(os.stat(self.target).st_mode) or "a file"
            raise OutDirError(f"run directory {shown}: it is {kind}, not a directory")
        if self.target.is_dir():
            foreign = sorted(entry_shown(p) for p in self.target.iterdir()   # a FIFO, a device: never replaced
                             if not stat.S_ISREG(p.lstat().st_mode) or not RUN_FILE.match(p.name))
            if foreign:
                listed = ", ".join(shorten_text(f, 60) for f in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
                raise OutDirError(f"run directory {shown}: it holds {len(foreign)} entr"
                                  f"{'y' if len(foreign) == 1 else 'ies'} a run does not write ({listed}); a run "
                                  f"replaces its directory as a whole, so choose an empty or new one, or a run "
                                  f"directory")
            earlier = [f for f in EARLIER_RUN_FILES if (self.target / f).is_file()]
            if earlier and not self.force:
                raise OutDirError(f"run directory {shown} already holds a run ({earlier_run(self.target)}); a new "
                                  f"run never replaces it silently: add --force to replace it, or give --out NEWDIR")

    def _clean_after(self, dead: dict) -> None:
        clean_after(self.target, dead)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with signals_held():           # a signal now waits until the directory is in place and unlocked
            try:
                if not self.path.is_dir():
                    return             # the staging directory was removed under the run: nothing to move
                if kind is not None and not any(self.path.iterdir()):
                    shutil.rmtree(self.path, ignore_errors=True)  # nothing written: the directory stays as it was
                elif kind is not None and (self.target / "summary.json").is_file():
                    # a finished run is replaced only by a finished one (--force): this one did not finish
                    self.kept_earlier = earlier_run(self.target)
                    shutil.rmtree(self.path, ignore_errors=True)
                else:
                    if kind is not None:
                        self._record_unfinished(exc)
                    self._publish()
            finally:
                self.lock.__exit__(kind, exc, tb)

    def _record_unfinished(self, exc: BaseException | None) -> None:
        """An interrupted or failed run: no summary.json, and a run.json that says what ended it."""
        (self.path / "summary.json").unlink(missing_ok=True)
        interrupted = isinstance(exc, KeyboardInterrupt)
        record = {
            "finished": False, "interrupted": interrupted,
            "signal": (exc.signal_name if isinstance(exc, RunInterrupted) else "SIGINT") if interrupted else None,
            "error": None if interrupted else shorten_text(f"{type(exc).__name__}: {exc}", 2000),
            "steps_finished": len(self.steps.rows), "pid": os.getpid(), "host": socket.gethostname(),
            "started_at": self._started, "ended_at": _now(),
        }
        write_run_record(self.path, record)

    def _publish(self) -> None:
        """Move the staging directory into place, replacing the previous run's directory as a whole."""
        move_into_place(self.path, self.target)


def clean_after(target: Path, dead: dict) -> None:
    """Remove what a dead writer of `target` (its lock's record, `RunDirLock.stale`) left beside it: its staging
    directory, a half-done swap (the previous directory put back when the writer died between the two renames)."""
    name = dead.get("staging")
    prefix = f".{target.name}.partial-"
    if isinstance(name, str) and name.startswith(prefix) and "/" not in name:
        shutil.rmtree(target.parent / name, ignore_errors=True)
        old = target.parent / (name + ".old")
        if old.is_dir():
            if not target.exists():
                os.rename(old, target)      # it died between the two renames: put the last one back
            else:
                shutil.rmtree(old, ignore_errors=True)


def staging_beside(target: str | os.PathLike) -> Path:
    """A new staging directory's path beside `target` (same file system): ``.<name>.partial-<pid>-<hex>``."""
    target = _place(target)
    return target.parent / f".{target.name}.partial-{os.getpid()}-{secrets.token_hex(3)}"


def move_into_place(staging: Path, target: Path) -> None:
    """Replace `target` by the directory `staging` as a whole: an atomic exchange where the file system offers one,
    else two renames; the previous directory's files are deleted after."""
    if not target.exists():
        os.rename(staging, target)
        return
    if _exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)         # now the previous directory's files
        return
    old = staging.with_name(staging.name + ".old")
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


_RENAME_EXCHANGE = 2
_libc = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux renameat2 RENAME_EXCHANGE); False where it is not offered."""
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):   # a file system without it (NFS, ...)
        return False
    raise OSError(code, os.strerror(code), str(b))


def _block_signals() -> set | None:
    """Mask SIGINT/SIGTERM/SIGHUP in this (the main) thread; the previous mask, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)


def _unblock_signals(previous: set | None) -> None:
    if previous is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT/SIGTERM/SIGHUP for the duration: a finished step is written to steps.csv and counted as one,
    never half, and the run directory is moved into place whole.

    A signal that arrives is recorded and handed to the handler that was in place once the block ends (the
    CLI's raises RunInterrupted there). Masking the main thread alone is not enough: the kernel may deliver a
    process-wide signal to any thread that does not mask it (Ray's threads), and Python then runs the handler
    in the main thread at its next instruction, inside the block. So the handlers are swapped for recorders
    as well. Off the main thread (where handlers cannot be set) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    callers = {s: signal.getsignal(s) for s in _SIGNALS}
    for s in callers:
        signal.signal(s, lambda signum, frame: held.append(signum))
    blocked = _block_signals()
    try:
        yield
    finally:
        _unblock_signals(blocked)            # a signal masked meanwhile is delivered now, to the recorders
        for s, h in callers.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        if held:
            handler = callers.get(held[0])
            if callable(handler):
                handler(held[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(held[0])

