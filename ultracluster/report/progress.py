"""Run events (actors starting and started, steps replayed) → a progress display on stderr.

On a terminal (a TTY): one bar line, redrawn in place a few times a second, that appears only once the
run has taken `delay_s` (2 s), so short runs print nothing, and is erased when the run ends. Elsewhere
(a pipe, a log file, `ray job logs`): one plain line per event. `ultracluster run --quiet` makes none.
The pipeline calls `starting`, `started` and `step_done`; the CLI calls `finish`.
"""
from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import Callable, TextIO

BAR_WIDTH = 24
SPINNER = "|/-\\"


class Progress:
    """Progress of one run.

    Args:
        name: the scenario name, shown first.
        stream: where to write (default sys.stderr).
        tty: draw a bar (True) or plain lines (False); default: whether `stream` is a TTY.
        delay_s: a bar appears only after this many seconds of the run.
        tick_s: redraw period of the bar in s; None draws only on events (tests).
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(self, name: str, stream: TextIO | None = None, tty: bool | None = None, delay_s: float = 2.0,
                 tick_s: float | None = 0.2, clock: Callable[[], float] = time.monotonic):
        self.name, self.stream = name, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.delay_s, self.tick_s, self.clock = delay_s, tick_s, clock
        self.t0 = clock()
        self.actors, self.nodes, self.actors_up = 0, 0, False
        self.steps, self.warmup, self.done = 0, 0, 0
        self.last_step_s: float | None = None
        self._t_actors: float | None = None
        self._drawn, self._frame = False, 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- events -------------------------------------------------------------------------------------------
    def starting(self, actors: int, steps: int, warmup: int = 0) -> None:
        """The run is about to start `actors` actors and replay `steps` steps, `warmup` of them warm-up."""
        with self._lock:
            self.actors, self.steps, self.warmup = actors, steps, warmup
        if not self.tty:
            self._say(f"starting {actors} actor{'s' * (actors != 1)} for {steps} step{'s' * (steps != 1)}"
                      + (f" ({warmup} warm-up)" if warmup else ""))
        elif self.tick_s and self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="ultracluster-progress", daemon=True)
            self._thread.start()
        self._draw()

    def started(self, nodes: int) -> None:
        """Every actor answered; they run on `nodes` Ray nodes."""
        with self._lock:
            self.actors_up, self.nodes, self._t_actors = True, nodes, self.clock() - self.t0
        if not self.tty:
            self._say(f"{self.actors} actor{'s' * (self.actors != 1)} started on {nodes} Ray "
                      f"node{'s' * (nodes != 1)} in {self._t_actors:.1f} s")
        self._draw()

    def step_done(self, rec) -> None:
        """A step finished (a StepRecord: step, warmup, step_time_s, wall_s)."""
        with self._lock:
            self.done += 1
            self.last_step_s = rec.step_time_s
        if not self.tty:
            tag = " (warm-up)" if rec.warmup else ""
            total = f"/{self.steps}" if self.steps else ""
            self._say(f"step {rec.step + 1}{total}{tag}: {rec.step_time_s:.4g} s emulated, {rec.wall_s:.2f} s wall")
        self._draw()

    def finish(self) -> None:
        """Stop redrawing and erase the bar (the summary follows)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            if self._drawn:
                self.stream.write("\r\033[K")
                self.stream.flush()
                self._drawn = False

    # --- drawing ------------------------------------------------------------------------------------------
    def line(self) -> str:
        """The bar's text at this moment."""
        elapsed = self.clock() - self.t0
        parts = [self.name]
        if not self.actors_up:
            parts.append(f"starting {self.actors} actors {SPINNER[self._frame % len(SPINNER)]}")
        else:
            filled = BAR_WIDTH * self.done // self.steps if self.steps else 0
            parts.append(f"{self.actors} actors on {self.nodes} node{'s' * (self.nodes != 1)}")
            parts.append(f"steps [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.steps}"
                         + (" warm-up" if self.done < self.warmup else ""))
            if self.last_step_s is not None:
                parts.append(f"last step {self.last_step_s:.4g} s emulated")
        parts.append(f"{elapsed:.1f} s")
        return " | ".join(parts)

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

    def _say(self, text: str) -> None:
        with self._lock:
            print(f"{self.name}: {text}", file=self.stream, flush=True)
