"""calibrate.html in a real headless Chromium at 1,400 px (like report.html, test_report_browser.py): a real
two-row profile (`ultracluster calibrate`), then the same page with a factor moved +448.7 %. No script error and
no request; the page never scrolls sideways and the rows table fits inside it (its long cells wrap); the log axes
carry several labelled ticks, in order; a factor's change is coloured by the size of the move, never green."""
from __future__ import annotations

import json
import re

from test_report_browser import colours, load

from ultracluster.calibrate.html import move_size, render
from ultracluster.cli import main
from ultracluster.calibration.fitted_files import fitted
from ultracluster.layouts.setting_times import one_step, replayed_step_time
from ultracluster.scenario import load_scenario

WINDOW = 1400          # px: the window every page must fit (issue 44)


def _profile(tmp_path, scenarios_dir) -> dict:
    """Two shipped scenarios measured 8 % slower than the shipped fit: close step times, a narrow axis."""
    rows = []
    for name in ("calib-llama2-7b-tp8.yaml", "calib-gpt3-6.7b-tp8.yaml"):
        sc = load_scenario(scenarios_dir / name)
        step = 1.08 * replayed_step_time(one_step(sc), fitted())
        rows.append(f"{scenarios_dir / name},{sc.training.global_batch / step!r},my stack 2.21 " + "words " * 12)
    (tmp_path / "m.csv").write_text("scenario,seq_per_s,note\n" + "\n".join(rows) + "\n")
    assert main(["calibrate", str(tmp_path / "m.csv"), "--out", str(tmp_path / "out" / "p.json"), "--quiet"]) == 0
    return json.loads((tmp_path / "out" / "p.json").read_text())


def _ticks(chart: list[dict]) -> list[float]:
    return [float(t["text"]) for t in chart if t["cls"] == "tick" and t["width"] > 0]


def test_calibrate_html_fits_1400_px_with_readable_axes(chromium, tmp_path, scenarios_dir):
    doc = _profile(tmp_path, scenarios_dir)
    page = tmp_path / "out" / "calibrate.html"
    seen, widths = [], []
    _, errors, requests = load(chromium, page, seen=seen, width=WINDOW, widths=widths)
    assert errors == [] and requests == []
    w = widths[0]
    assert w["page"] <= WINDOW, w                                      # no horizontal overflow of the page
    rows = next(t for t in w["tables"] if t["first"] == "row")
    assert rows["width"] <= 1150 + 0.5, w                               # inside the page's column: no box to scroll
    values = _ticks(seen[0]["charts"][0])
    x_axis, y_axis = values[0::2], values[1::2]                         # each tick is labelled on both axes
    assert x_axis == y_axis and len(x_axis) >= 4 and x_axis == sorted(set(x_axis)), values
    low, high = min(r["step_time_s"] for r in doc["rows"]), max(r["step_time_s"] for r in doc["rows"])
    assert sum(low / 1.25 <= v <= high * 1.25 for v in x_axis) >= 4     # within the points' span, not beside it
    # what a reader reads in the rows: the scenario's file name (its path in the tooltip) and the whole note
    table = next(t for t in seen[0]["tables"] if t and t[0][0] == "row")
    assert table[1][1].replace("\n", "").startswith("calib-") and "my stack 2.21" in table[1][-1]


def test_a_large_factor_change_is_not_green(chromium, tmp_path, scenarios_dir):
    doc = _profile(tmp_path, scenarios_dir)
    name = doc["fitted"][0]
    shipped = doc["shipped_calibration"]["factors"][name]
    doc["factors"][name] = shipped * 5.487                              # +448.7 %
    html = render(doc)
    cell = re.search(r'<td class="([^"]*)">\+448\.7 %</td>', html)
    assert cell and cell.group(1) == "moved-far" and 'class="better">+448.7' not in html
    assert [move_size(1.0, v) for v in (1.0, 1.04, 1 / 1.04, 1.2, 1 / 1.2, 1.6, 1 / 1.6, 0.0)] == \
        ["small", "small", "small", "medium", "medium", "large", "large", "large"]     # the ratio, either way
    (tmp_path / "moved.html").write_text(html)
    seen = []
    png, errors, _ = load(chromium, tmp_path / "moved.html", seen=seen, width=WINDOW)
    assert errors == []
    factors = next(t for t in seen[0]["tables"] if t and t[0][0] == "factor")
    assert any(r[3] == "+448.7 %" for r in factors)
    assert "red beyond" in seen[0]["text"]                              # the colours are explained beside them
    seen_colours = colours(png)
    assert seen_colours.get("c0392b", 0) > 20 and seen_colours.get("1a7f37", 0) == 0   # red drawn, no green
