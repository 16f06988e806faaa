"""report.html and compare.html in a real headless Chromium: a non-blank screenshot, no console errors,
no network request (no Ray).

The test never installs anything. It uses the Chromium named by `CHROMIUM`, else the first of `chromium`,
`chromium-browser`, `google-chrome` on the PATH (the `chromium` fixture, tests/report/conftest.py). Without
one it skips with a line saying how to enable it; in CI (`CI=true`) it fails instead, so it can never
silently drop out of CI (`.ci/run` installs Debian's `chromium` before the tests). The page is driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: NUL-separated JSON on fds 3 and 4), with the standard library only.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from test_report_frames import make_infeasible, make_result
from ultracluster.report import build_report, write_compare_html, write_run_dir
from ultracluster.report.html import PART_COLORS, PHASE_COLORS, STREAM_COLORS

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--disable-dev-shm-usage", "--remote-debugging-pipe", "about:blank"]
TIMEOUT_S = 60


class Browser:
    """Just enough of the DevTools protocol over --remote-debugging-pipe to load a page and watch it."""

    def __init__(self, binary: str):
        self.profile = tempfile.mkdtemp(prefix="uc-chromium-")
        to_child, self._w = os.pipe()      # the browser reads commands on its fd 3
        self._r, from_child = os.pipe()    # and writes answers and events on its fd 4
        # the child's ends, moved above 9, become its fds 3 and 4 through bash's redirections (no
        # preexec_fn: this process runs Ray's threads)
        hi = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]
        os.close(to_child)
        os.close(from_child)
        shell = f'exec "$0" "$@" 3<&{hi[0]} 4>&{hi[1]} {hi[0]}<&- {hi[1]}>&-'
        self.proc = subprocess.Popen(["bash", "-c", shell, binary, f"--user-data-dir={self.profile}", *FLAGS],
                                     pass_fds=tuple(hi), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for fd in hi:
            os.close(fd)
        self._buf, self._id, self.events = b"", 0, []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed the pipe: {self.proc.stderr.read().decode()[-2000:]}")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            got = self._read(deadline)
            if got.get("id") == self._id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return got.get("result", {})
            self.events.append(got)

    def wait_for(self, method: str) -> dict:
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            got = self._read(deadline)
            self.events.append(got)
            if got.get("method") == method:
                return got

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # noqa: BLE001 - closing anyway
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        shutil.rmtree(self.profile, ignore_errors=True)


# What a reader sees: every rendered text of the page (its innerText) and, per chart, the texts drawn in it
# with their rendered width (0 when nothing is drawn), read from the laid-out page.
SEEN = """JSON.stringify({
  text: document.body.innerText,
  charts: Array.prototype.map.call(document.querySelectorAll("svg"), function (svg) {
    return Array.prototype.map.call(svg.querySelectorAll("text"), function (t) {
      return {cls: t.getAttribute("class") || "", text: t.textContent, width: t.getBBox().width};
    });
  }),
  tables: Array.prototype.map.call(document.querySelectorAll("table"), function (table) {
    return Array.prototype.map.call(table.querySelectorAll("tr"), function (tr) {
      return Array.prototype.map.call(tr.children, function (c) { return c.innerText; });
    });
  })
})"""


def load(binary: str, page: Path, seen: list | None = None, height: int = 1600, width: int = 1200,
         widths: list | None = None) -> tuple[bytes, list[str], list[str]]:
    """Open a local page in a `width` x `height` window; return (PNG screenshot of the first `height` pixels,
    console/JS errors, URLs requested besides the page). With `seen`, append to it what a reader sees (`SEEN`,
    parsed); with `widths`, the page's scroll width and each table's width in px (a page wider than its window
    scrolls sideways; a table in a `.wide` box scrolls inside it)."""
    b = Browser(binary)
    try:
        target = b.call("Target.createTarget", url="about:blank")["targetId"]
        s = b.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.call(f"{domain}.enable", s)
        b.call("Emulation.setDeviceMetricsOverride", s, width=width, height=height, deviceScaleFactor=1, mobile=False)
        b.call("Page.navigate", s, url=page.resolve().as_uri())
        b.wait_for("Page.loadEventFired")
        # run the page's script once more through a click on a sortable header: its errors count too
        b.call("Runtime.evaluate", s, expression="var th=document.querySelector('table.sortable th');"
                                                 "if(th){th.click();th.click();}")
        png = base64.b64decode(b.call("Page.captureScreenshot", s, format="png", optimizeForSpeed=True)["data"])
        if seen is not None:
            seen.append(json.loads(b.call("Runtime.evaluate", s, expression=SEEN, returnByValue=True)["result"]["value"]))
        if widths is not None:
            widths.append(json.loads(b.call("Runtime.evaluate", s, returnByValue=True, expression=(
                "JSON.stringify({page: document.documentElement.scrollWidth, tables: Array.prototype.map.call("
                "document.querySelectorAll('table'), function (t) { return {width: t.getBoundingClientRect().width, "
                "boxed: t.parentElement.classList.contains('wide'), first: t.querySelector('th').textContent}; })})"
            ))["result"]["value"]))
        errors, requests = [], []
        for e in b.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                errors.append(f"{d.get('text')} {d.get('exception', {}).get('description', '')} at {d.get('url')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(json.dumps(p.get("args"))[:500])
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                errors.append(p["entry"].get("text", "")[:500])
            elif m == "Network.requestWillBeSent" and p["request"]["url"] != page.resolve().as_uri():
                requests.append(p["request"]["url"])
        return png, errors, requests
    finally:
        b.close()


def png_pixels(png: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) into an [height, width, 3] array.

    Rows filtered with None, Sub or Up (all of them with optimizeForSpeed) are undone with numpy; Average
    and Paeth rows byte by byte.
    """
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    width, height, depth, color, _, _, interlace = ihdr
    assert depth == 8 and color in (2, 6) and interlace == 0, ihdr
    bpp, stride = (3 if color == 2 else 4), width * (3 if color == 2 else 4)
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:]
        if f == 0:
            cur = line.copy()
        elif f == 1:
            cur = (line.reshape(width, bpp).astype(np.int64).cumsum(axis=0) % 256).astype(np.uint8).ravel()
        elif f == 2:
            cur = line + prev   # uint8 arithmetic wraps modulo 256
        else:
            cur, b = bytearray(line.tobytes()), prev.tobytes()
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                c = b[i - bpp] if i >= bpp else 0
                if f == 3:
                    cur[i] = (cur[i] + (a + b[i]) // 2) & 255
                else:
                    p = a + b[i] - c
                    pa, pb, pc = abs(p - a), abs(p - b[i]), abs(p - c)
                    cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b[i] if pb <= pc else c)) & 255
            cur = np.frombuffer(bytes(cur), dtype=np.uint8)
        out[y], prev = cur, cur
    return out.reshape(height, width, bpp)[:, :, :3]


def colours(png: bytes) -> dict[str, int]:
    """How many pixels of each colour ("rrggbb") the screenshot has."""
    px = png_pixels(png).astype(np.int64)
    keys, counts = np.unique((px[..., 0] << 16) | (px[..., 1] << 8) | px[..., 2], return_counts=True)
    return {f"{k:06x}": int(n) for k, n in zip(keys.tolist(), counts.tolist())}


def test_png_decoder_against_a_known_image():
    """The decoder itself: a 3 x 2 image, one row Sub-filtered, one Paeth-filtered."""
    rgb = [[(255, 0, 0), (0, 255, 0), (0, 0, 255)], [(10, 20, 30), (40, 50, 60), (70, 80, 90)]]
    row0 = bytes(sum(rgb[0], ()))
    sub = bytes([row0[i] - (row0[i - 3] if i >= 3 else 0) & 255 for i in range(9)])
    row1 = bytes(sum(rgb[1], ()))

    def paeth(a, b, c):
        p = a + b - c
        return a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
    pae = bytes([(row1[i] - paeth(row1[i - 3] if i >= 3 else 0, row0[i], row0[i - 3] if i >= 3 else 0)) & 255
                 for i in range(9)])
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", 0)  # noqa: E731
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 3, 2, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\x01" + sub + b"\x04" + pae)) + chunk(b"IEND", b""))
    assert png_pixels(png).tolist() == [[list(p) for p in r] for r in rgb]
    assert colours(png)["ff0000"] == 1


UNIT_TICK = re.compile(r"^-?[0-9][0-9,.]* (s|ms|µs|ns|GiB)$")     # an axis tick: a number and its unit
NOISE = re.compile(r"\d[eE][-+]?\d")                                 # 2.22045e-16, 7.33581e-05


def test_report_html_renders_in_chromium(chromium, tmp_path):
    run = write_run_dir(build_report(make_result()), tmp_path / "run")
    seen: list = []
    png, errors, requests = load(chromium, run / "report.html", seen)
    assert errors == [] and requests == []
    page = seen[0]
    # every chart has a titled axis whose ticks read as numbers with units, drawn (a width on the page)
    assert len(page["charts"]) == 4                        # interval, breakdown, timeline, HBM
    for chart in page["charts"]:
        ticks = [t for t in chart if t["cls"] == "tick"]
        axis = [t for t in chart if t["cls"] == "axis"]
        assert len(ticks) >= 3 and all(UNIT_TICK.match(t["text"]) and t["width"] > 0 for t in ticks), ticks
        assert len(axis) == 1 and axis[0]["width"] > 50, axis
    interval, _, _, hbm = page["charts"]
    assert "step time (band: 80 % interval; line: point estimate)" in [t["text"] for t in interval]
    assert [t["text"] for t in interval if t["cls"] == "tick"][:2] == ["0 s", "0.5 s"]
    assert any(t["cls"] == "limit" and t["text"] == "capacity: 32 GiB of HBM per rank" and t["width"] > 0
               for t in hbm)
    # the slowest ranks: ranks 8 and 24 have the same figures and share one row, with their count
    ranks = next(t for t in page["tables"] if t[0][:2] == ["ranks", "count"])
    assert [r[:2] for r in ranks[1:]] == [["5", "1"], ["20", "1"], ["8, 24", "2"]]
    assert ranks[3][3:5] == ["450 ms", "180 ms"]
    text = page["text"]
    assert "HBM peak per rank\n20.5 GiB of 32 GiB (64.1 %)" in text
    assert "warning: no storage configured" in text and not NOISE.search(text)
    seen = colours(png)
    assert png_pixels(png).shape == (1600, 1200, 3)
    assert len(seen) > 20                                   # text, bars, legend: not a blank page
    assert seen.get("ffffff", 0) < 0.98 * 1600 * 1200
    # drawn: the breakdown's and timeline's compute colour, the timeline's backward and tp colours
    assert seen.get(PART_COLORS["compute_s"][1:], 0) > 2000
    assert seen.get(PHASE_COLORS["B"][1:], 0) > 200 and seen.get(STREAM_COLORS["tp"][1:], 0) > 50


def test_compare_page_shows_capacity_and_no_noise(chromium, tmp_path):
    noisy = build_report(make_result())
    noisy.summary = {**noisy.summary, "bubble_s": noisy.summary["bubble_s"] + 1.09635e-15,
                     "step_time_s": noisy.summary["step_time_s"] * (1 + 2.22e-16)}
    page = write_compare_html([("a", build_report(make_result())), ("b", noisy)], tmp_path / "cmp" / "compare.html")
    seen: list = []
    png, errors, requests = load(chromium, page, seen)
    assert errors == [] and requests == []
    table = next(t for t in seen[0]["tables"] if t[0][0] == "field")
    rows = {r[0]: r[1:] for r in table[1:]}
    assert rows["bubble_s"] == ["100 ms", "100 ms", "0"] and rows["step_time_s"] == ["1.25 s", "1.25 s", "0"]
    assert rows["hbm_peak_gib"] == ["20.5 of 32 GiB", "20.5 of 32 GiB", "0"]
    assert not NOISE.search(seen[0]["text"])
    assert colours(png).get("c0392b", 0) > 20                # the red dashed capacity lines are drawn
    hbm = seen[0]["charts"][-1]
    assert [t["text"] for t in hbm if t["cls"] == "axis"] == ["HBM per rank"]
    assert [t["text"] for t in hbm if t["cls"] == "limit" and t["width"] > 0] == ["capacity 32 GiB"] * 2


def test_compare_page_of_three_runs_fits_1400_px_with_every_pair(chromium, tmp_path):
    faster = build_report(make_result())
    faster.summary = {**faster.summary, "step_time_s": 1.0, "step_time_low_s": 0.9, "step_time_high_s": 1.05}
    runs = [("a-run-with-a-long-label", build_report(make_result())), ("b-faster", faster),
            ("c-infeasible", build_report(make_infeasible()))]
    page = write_compare_html(runs, tmp_path / "cmp" / "compare.html")
    seen, widths = [], []
    _, errors, requests = load(chromium, page, seen, width=1400, widths=widths)
    assert errors == [] and requests == []
    assert widths[0]["page"] <= 1400, widths                          # the page never scrolls sideways
    pairs = next(t for t in seen[0]["tables"] if t[0][0].startswith("pair"))
    assert [r[0] for r in pairs[1:]] == ["b-faster vs a-run-with-a-long-label",
                                         "c-infeasible vs a-run-with-a-long-label", "c-infeasible vs b-faster"]
    box = next(t for t in widths[0]["tables"] if t["first"].startswith("pair"))
    assert box["width"] <= 1150 + 0.5                                 # within the page's column, not boxed away


def test_infeasible_report_and_compare_page_render(chromium, tmp_path):
    bad = write_run_dir(build_report(make_infeasible()), tmp_path / "bad")
    png, errors, requests = load(chromium, bad / "report.html")
    assert errors == [] and requests == [] and len(colours(png)) > 20
    assert colours(png).get("fdecea", 0) > 1000            # the red "Infeasible" banner
    page = write_compare_html([("a", build_report(make_result())), ("b", build_report(make_infeasible()))],
                              tmp_path / "cmp" / "compare.html")
    png, errors, requests = load(chromium, page)
    assert errors == [] and requests == [] and len(colours(png)) > 20


def test_the_check_sees_script_errors_and_network(chromium, tmp_path):
    """The same check fails a page with a script error and one that loads from the network."""
    page = tmp_path / "broken.html"
    page.write_text('<!DOCTYPE html><html><body><p>x</p><img src="http://192.0.2.1/x.png">'
                    "<script>undefinedFunction();</script></body></html>")
    _, errors, requests = load(chromium, page)
    assert any("undefinedFunction" in e for e in errors)
    assert requests == ["http://192.0.2.1/x.png"]
