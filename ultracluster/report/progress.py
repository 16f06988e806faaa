"""Run events (actors starting and started, steps replayed), or counted work in phases (the planner's layouts
enumerated and evaluated, its replays; a sweep's variants) → a progress display on stderr.

On a terminal (a TTY): one bar line, redrawn in place a few times a second, that appears only once the
work has taken `delay_s` (2 s), so short runs print nothing, and is erased when it ends. Elsewhere
(a pipe, a log file, `ray job logs`): plain lines, one per run event (`Progress`), or at a phase's start and
end and every `every_s` between (`WorkProgress`). `--quiet` makes none.
The pipeline calls `starting`, `started` and `step_done`; the planner and the sweep `phase`, `advance` and `say`;
the CLI calls `finish`.

Hand-written, not tqdm or rich, for what they do not do (docs/design.md, "Principles"): whole lines off a terminal
(tqdm writes its carriage-return redraws into a log, rich's live display nothing until it stops), and a bar that
moves while no event comes and appears only after 2 s. They would replace only the lines that draw and erase it.
"""
from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import Callable, TextIO

BAR_WIDTH = 24
SPINNER = "|/-\\"


def _bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // total if total else 0
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}]"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class _Display:
    """One progress line on a stream: a bar redrawn in place on a TTY, plain lines elsewhere.

    Args:
        name: shown first.
        stream: where to write (default sys.stderr).
        tty: draw a bar (True) or plain lines (False); default: whether `stream` is a TTY.
        delay_s: a bar appears only after this many seconds.
        tick_s: redraw period of the bar in s; None draws only on events (tests).
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, name: str, stream: TextIO | None = None, tty: bool | None = None, delay_s: float = 2.0,
                 tick_s: float | None = 0.2, clock: Callable[[], float] = time.monotonic):
        self.name, self.stream = name, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.delay_s, self.tick_s, self.clock = delay_s, tick_s, clock
        self.t0 = clock()
        self._drawn, self._frame = False, 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def line(self) -> str:
        """The bar's text at this moment."""
        raise NotImplementedError

    def say(self, text: str) -> None:
        """A message line (the bar, if drawn, is erased first and comes back at the next redraw)."""
        with self._lock:
            self._erase()
            print(text, file=self.stream, flush=True)

    def finish(self) -> None:
        """Stop redrawing and erase the bar (what follows is printed in its place)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            self._erase()

    def _said(self, text: str) -> None:
        """A plain line off a terminal, after the name."""
        if not self.tty:
            self.say(f"{self.name}: {text}")

    def _spinner(self) -> str:
        return SPINNER[self._frame % len(SPINNER)]

    def _erase(self) -> None:          # with the lock held
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False

    def _start_ticking(self) -> None:
        if self.tty and self.tick_s and self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="ultracluster-progress", daemon=True)
            self._thread.start()

    def _draw(self) -> None:
        if not self.tty or self.clock() - self.t0 < self.delay_s:
            return
        with self._lock:
            if self._stop.is_set():
                return
            self._frame += 1
            width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
            self.stream.write("\r\033[K" + self.line()[:width])
            self.stream.flush()
            self._drawn = True

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            self._draw()


class Progress(_Display):
    """Progress of one run (arguments: `_Display`'s)."""

    def __init__(self, name: str, **display):
        super().__init__(name, **display)
        self.actors, self.nodes, self.actors_up = 0, 0, False
        self.steps, self.warmup, self.done = 0, 0, 0
        self.last_step_s: float | None = None

    def starting(self, actors: int, steps: int, warmup: int = 0) -> None:
        """The run is about to start `actors` actors and replay `steps` steps, `warmup` of them warm-up."""
        with self._lock:
            self.actors, self.steps, self.warmup = actors, steps, warmup
        self._said(f"starting {_plural(actors, 'actor')} for {_plural(steps, 'step')}"
                   + (f" ({warmup} warm-up)" if warmup else ""))
        self._start_ticking()
        self._draw()

    def started(self, nodes: int) -> None:
        """Every actor answered; they run on `nodes` Ray nodes."""
        with self._lock:
            self.actors_up, self.nodes = True, nodes
        self._said(f"{_plural(self.actors, 'actor')} started on {_plural(nodes, 'Ray node')} in "
                   f"{self.clock() - self.t0:.1f} s")
        self._draw()

    def step_done(self, rec) -> None:
        """A step finished (a StepRecord: step, warmup, step_time_s, wall_s)."""
        with self._lock:
            self.done += 1
            self.last_step_s = rec.step_time_s
        self._said(f"step {rec.step + 1}{f'/{self.steps}' if self.steps else ''}{' (warm-up)' if rec.warmup else ''}"
                   f": {rec.step_time_s:.4g} s emulated, {rec.wall_s:.2f} s wall")
        self._draw()

    def line(self) -> str:
        parts = [self.name]
        if not self.actors_up:
            parts.append(f"starting {self.actors} actors {self._spinner()}")
        else:
            parts.append(f"{self.actors} actors on {_plural(self.nodes, 'node')}")
            parts.append(f"steps {_bar(self.done, self.steps)} {self.done}/{self.steps}"
                         + (" warm-up" if self.done < self.warmup else ""))
            if self.last_step_s is not None:
                parts.append(f"last step {self.last_step_s:.4g} s emulated")
        return " | ".join(parts + [f"{self.clock() - self.t0:.1f} s"])


def duration(seconds: float) -> str:
    """A time span for people: "8 s", "4.5 min", "2.1 h"."""
    if not seconds < float("inf"):
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _pace(per_s: float) -> str:
    """A rate for people: "2,076/s", or "12.5 s each" below one a second."""
    return f"{per_s:,.0f}/s" if per_s >= 1 or per_s <= 0 else f"{1 / per_s:.1f} s each"


class WorkProgress(_Display):
    """Progress of counted work in phases (the planner: layouts enumerated, layouts evaluated, layouts replayed),
    with the count done, the rate and an estimate of the time left from the phase's rate so far.

    On a TTY the bar; elsewhere a line when a phase starts, one every `every_s` seconds while it runs, and one
    when it ends. `say` prints a message line (erasing the bar first). Other arguments: `_Display`'s.
    """

    def __init__(self, name: str, every_s: float = 10.0, **display):
        super().__init__(name, **display)
        self.every_s = every_s
        self.label, self.unit, self.total, self.done = "", "", 0, 0
        self._t_phase = self._t_said = self.t0

    def phase(self, label: str, total: int, unit: str = "layouts") -> None:
        """A phase of `total` units of work begins (ending the one before)."""
        self._end_phase()
        with self._lock:
            self.label, self.unit, self.total, self.done = label, unit, total, 0
            self._t_phase = self._t_said = self.clock()
        self._said(f"{label} {total:,} {self._units(total)}")
        self._start_ticking()
        self._draw()

    def advance(self, done: int) -> None:
        """`done` units of the phase are done so far."""
        with self._lock:
            self.done = done
            due = not self.tty and self.clock() - self._t_said >= self.every_s and done < self.total
        if due:
            rate, left = self._rate_left()
            pct = 100 * done // self.total if self.total else 100
            self._said(f"{self.label}: {done:,}/{self.total:,} {self.unit} ({pct}%), {_pace(rate)}, about "
                       f"{duration(left)} left")
            self._t_said = self.clock()
        self._draw()

    def finish(self) -> None:
        self._end_phase()
        super().finish()

    def _end_phase(self) -> None:
        if self.label:
            self._said(f"{self.label}: {self.done:,} {self._units(self.done)} in {self.clock() - self._t_phase:.1f} s")
        self.label = ""

    def _units(self, n: int) -> str:
        return self.unit.removesuffix("s") if n == 1 else self.unit

    def _rate_left(self) -> tuple[float, float]:
        """The phase's units per second so far, and the seconds left at that rate (inf before any is done)."""
        spent = self.clock() - self._t_phase
        rate = self.done / spent if spent > 0 else 0.0
        return rate, (self.total - self.done) / rate if rate > 0 else float("inf")

    def line(self) -> str:
        parts = [self.name]
        if self.label:
            rate, left = self._rate_left()
            parts.append(f"{self.label} {_bar(self.done, self.total)} {self.done:,}/{self.total:,} {self.unit}")
            parts.append(f"{_pace(rate)}, about {duration(left)} left" if self.done else
                         f"estimating {self._spinner()}")
        return " | ".join(parts + [f"{self.clock() - self.t0:.1f} s"])
