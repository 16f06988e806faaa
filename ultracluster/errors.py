"""Failure kinds of ultracluster: bad input, actor failures, interruptions -> exceptions and exit codes.

Three kinds of failure are kept apart (see docs/design.md "Principles"):

* ``ScenarioError``: bad input. It carries every ``Problem`` found (field path, what was given, what is
  allowed) so that ``ultracluster validate`` prints them all at once, never a traceback.
* an infeasible layout (does not fit in HBM, ...) is a *result* reported by the run, not an exception.
* ``assert``: our own bugs only.

A run ended by a signal (SIGINT, SIGTERM, SIGHUP) raises ``RunInterrupted``, a ``KeyboardInterrupt``, and
exits 128 + the signal's number. Every value an error message echoes goes through ``shorten``: at most
``GIVEN_MAX_CHARS`` characters, then an ellipsis and the full length.

All exceptions pickle, because Ray moves them between processes.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_RUNTIME = 4
GIVEN_MAX_CHARS = 200           # the longest value an error message echoes before cutting it
PROBLEMS_SHOWN = 50             # problems printed at most, then how many more there are


def kind_of(document: object) -> str:
    """A whole document that is not what was expected, in words, without its content (a file's text is never
    echoed: `calibrate /etc/passwd` names what the file is, not what it holds): "a string of 1,293 characters",
    "a list of 3 items"; a short number or a bool as itself."""
    if isinstance(document, (str, bytes)):
        return f"a {'string' if isinstance(document, str) else 'byte string'} of {len(document):,} characters"
    if isinstance(document, (list, tuple)):
        return f"a list of {len(document):,} item{'s' * (len(document) != 1)}"
    if isinstance(document, dict):
        return f"a mapping of {len(document):,} key{'s' * (len(document) != 1)}"
    if document is None:
        return "an empty document"
    if isinstance(document, (bool, int, float)) and len(repr(document)) <= 40:
        return repr(document)
    return f"a {type(document).__name__}"


def shorten(value: object, limit: int = GIVEN_MAX_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters, with an ellipsis and the full length when cut.

    Never builds the whole repr of a big value: a 200 MB string or a list of a million items costs
    ``limit`` characters of work, whatever shares it holds.

    Args:
        value: anything an error message echoes (a YAML value, an override, a flag's argument).
        limit: characters kept.

    Returns:
        ``'abc'`` as ``repr`` gives it when short, else e.g. ``'aaaa…' (226,000,000 characters)`` or
        ``[1, 2, 3, …] (a list of 1,000,000 items)``.
    """
    pieces: list[str] = []
    room = [limit + 1]          # one more than kept: running out of room means the value was cut

    def emit(text: str) -> bool:
        pieces.append(text[:room[0]])
        room[0] -= len(pieces[-1])
        return room[0] > 0

    def walk(v: object) -> bool:   # False once the room is spent
        if isinstance(v, (str, bytes)):
            n = room[0]
            return emit(repr(v[:n])) and len(v) <= n
        if isinstance(v, (list, tuple, dict, set, frozenset)):
            opening, closing = {list: "[]", tuple: "()"}.get(type(v), "{}")
            if not emit(opening):
                return False
            for i, item in enumerate(v.items() if isinstance(v, dict) else v):
                if i and not emit(", "):
                    return False
                if not (walk(item[0]) and emit(": ") and walk(item[1]) if isinstance(v, dict) else walk(item)):
                    return False
            return emit("," if type(v) is tuple and len(v) == 1 else "") and emit(closing)
        try:
            return emit(repr(v))
        except ValueError:      # an int of more than 4300 digits has no repr
            return emit(f"<{type(v).__name__}>") and False

    if walk(value) and room[0] > 0:
        return "".join(pieces)
    if isinstance(value, (str, bytes)):
        whole = f"{len(value):,} {'characters' if isinstance(value, str) else 'bytes'}"
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        noun = "key" if isinstance(value, dict) else "item"
        whole = f"a {type(value).__name__} of {len(value):,} {noun}{'' if len(value) == 1 else 's'}"
    else:
        whole = type(value).__name__
    return f"{''.join(pieces)[:limit]}… ({whole})"


class UltraclusterError(Exception):
    """Base class of every error ultracluster raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One bad-input finding.

    Attributes:
        path: YAML path of the field, dotted, with ``[i]`` for list items (``"parallelism.tp"``,
            ``"model.moe.experts"``); ``"(file)"`` for a problem with the file itself, ``"--set"`` for a
            malformed override.
        given: what was given: the value, or ``"<missing>"``.
        allowed: what is allowed, in words (``"an integer >= 1"``, ``"one of: bf16, fp8, fp32"``).
    """

    path: str
    given: object
    allowed: str

    def __str__(self) -> str:
        return f"{shorten_text(self.path)}: given {shorten(self.given)}; allowed: {self.allowed}"


class ScenarioError(UltraclusterError):
    """A scenario (file, dict or ``--set`` overrides) is bad input; lists every problem found.

    Args:
        problems: every problem found, in the order found.
        source: the scenario file's path, or None for a scenario given as a dict.
    """

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(self.problems, source)

    def __reduce__(self) -> tuple[type, tuple[list[Problem], str | None]]:
        return (type(self), (self.problems, self.source))

    def __str__(self) -> str:
        where = f"scenario {shorten_text(self.source)}" if self.source else "scenario"
        lines = [f"{where} has {len(self.problems)} problem(s):"]
        lines += [f"  - {problem}" for problem in self.problems[:PROBLEMS_SHOWN]]
        if len(self.problems) > PROBLEMS_SHOWN:
            lines.append(f"  ... and {len(self.problems) - PROBLEMS_SHOWN} more problem(s)")
        return "\n".join(lines)


class ActorError(UltraclusterError):
    """A Ray actor (one emulated instance, UltraServer or folded shard) failed or timed out."""


class OutDirError(UltraclusterError):
    """A run directory cannot be written: another live run holds it, or it holds files no run writes, or
    it cannot be created. Bad input (exit 2); the message names the directory and, when held, the holder."""


class RunInterrupted(KeyboardInterrupt):
    """A run ended by a signal: SIGINT (Ctrl-C), SIGTERM (`ray job stop`, Kubernetes, Slurm) or SIGHUP.

    A ``KeyboardInterrupt``, so every cleanup that Ctrl-C runs (actors killed, embedded Ray stopped,
    steps.csv kept) runs for the others too.

    Args:
        signum: the signal's number.
    """

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(self.signal_name)

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self.signum,))

    @property
    def signal_name(self) -> str:
        """``"SIGTERM"``, ``"SIGINT"``, ..."""
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process a signal ended: 130, 143, 129."""
        return 128 + self.signum


def shorten_text(text: str, limit: int = GIVEN_MAX_CHARS) -> str:
    """``text`` itself (no quotes) when short, else its first ``limit`` characters, an ellipsis and its length."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
