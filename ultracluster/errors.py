"""Failure kinds of ultracluster: bad input, actor failures, interruptions -> exceptions and exit codes.

Three kinds of failure are kept apart (see docs/design.md "Principles"):

* ``ScenarioError``: bad input. It carries every ``Problem`` found (field path, what was given, what is
  allowed) so that ``ultracluster validate`` prints them all at once, never a traceback.
* an infeasible layout (does not fit in HBM, ...) is a *result* reported by the run, not an exception.
* ``assert``: our own bugs only.

All exceptions pickle, because Ray moves them between processes.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_RUNTIME = 4
EXIT_INTERRUPTED = 130


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
        return f"{self.path}: given {self.given!r}; allowed: {self.allowed}"


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
        where = f"scenario {self.source}" if self.source else "scenario"
        lines = [f"{where} has {len(self.problems)} problem(s):"]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)


class ActorError(UltraclusterError):
    """A Ray actor (one emulated instance, UltraServer or folded shard) failed or timed out."""
