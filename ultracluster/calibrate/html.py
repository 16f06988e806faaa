"""A profile → calibrate.html: one offline page (inline CSS and SVG, nothing loaded from the network), made with
the HTML kit (`report.html_kit`: its CSS, and its script that sorts the rows table by a clicked header).

Sections: the factors (shipped against fitted, with the identifiable range, or why each stayed), measured
against predicted step time before and after (a log-log scatter: each row's shipped prediction, its calibrated
one, its leave-one-out one, the diagonal and a ±10 % band), and every row in a table.
"""
from __future__ import annotations

import math
from html import escape

from ..report import html_kit as kit

W, H, PAD = 520, 420, 56            # the scatter, px
COLORS = {"before": "#9c9c9c", "after": "#4e79a7", "loo": "#f28e2b"}


def _fmt_pct(v) -> str:
    return "–" if v is None else f"{v:+.1f} %"


# how far a fitted factor moved from the shipped value, as a ratio either way (x 1.05 and / 1.05 alike): within
# MOVE_SMALL it is about the between-release spread of the published figures (6.1 %, docs/calibration.md) and reads
# neutral; beyond MOVE_LARGE (half as much again, or a third less) the profile's rows pull the factor far from every
# published run, which is worth a look at the rows (amber between the two, red beyond). Never green: a factor that
# moves is neither good nor bad, only more or less of a departure from the published fit.
MOVE_SMALL, MOVE_LARGE = 1.05, 1.5
MOVE_CLASS = {"small": "note", "medium": "moved", "large": "moved-far"}
MOVE_CSS = ".moved{color:#9a6700;font-weight:bold}.moved-far{color:#c0392b;font-weight:bold}"
# the rows table's long cells wrap, so that it fits the page's width (a row's scenario path is in its tooltip)
ROWS_CSS = ("table.rows{font-size:13px}table.rows td,table.rows th{padding:3px 5px}table.rows th{white-space:normal}"
            "table.rows td.wrap,table.rows td.name{white-space:normal;text-align:left}"
            "table.rows td.wrap{min-width:11em}"
            "table.rows td.path{white-space:normal;overflow-wrap:anywhere;min-width:8em;text-align:left}")
TICKS_MIN, TICKS_MAX = 4, 10         # labelled ticks an axis carries


def move_size(shipped: float, fitted: float) -> str:
    """"small", "medium" or "large": how far `fitted` is from `shipped` as a ratio either way (`MOVE_SMALL`,
    `MOVE_LARGE`); "large" when either is not positive."""
    if not (shipped > 0 and fitted > 0):
        return "large"
    ratio = max(fitted / shipped, shipped / fitted)
    return "small" if ratio <= MOVE_SMALL else "medium" if ratio <= MOVE_LARGE else "large"


def _tick_text(v: float, step: float) -> str:
    """A tick's label with the decimals its spacing needs (10.25, 10.5, 10.75; 0.02, 0.05)."""
    digits = next((d for d in range(12) if abs(round(step, d) - step) <= 1e-9 * step), 12)
    text = f"{v:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """Labelled log-axis ticks between 10^lo and 10^hi, as (value, label): the coarsest of 1, 1-3, 1-2-5 and
    1-2-...-9 x a power of ten that gives at least `TICKS_MIN` (at most `TICKS_MAX`), else, over a span too narrow
    for those, evenly spaced round values (1, 2 or 5 x a power of ten apart)."""
    a, b = 10.0 ** lo, 10.0 ** hi
    best: list[tuple[float, str]] = []
    for mantissas in ((1,), (1, 3), (1, 2, 5), tuple(range(1, 10))):
        vals = [m * 10.0 ** e for e in range(math.floor(lo) - 1, math.ceil(hi) + 1) for m in mantissas
                if lo <= math.log10(m * 10.0 ** e) <= hi]
        if TICKS_MIN <= len(vals) <= TICKS_MAX:
            return [(v, f"{v:g}") for v in vals]
        if len(vals) > TICKS_MAX:
            break
        best = [(v, f"{v:g}") for v in vals]
    mag = 10.0 ** math.ceil(math.log10(b - a))     # too few on a log grid: linear steps of 5, 2 or 1 x 10^k
    step = mag
    for step in (m * mag / 10.0 ** k for k in range(12) for m in (1, 0.5, 0.2)):
        if math.floor(b / step) - math.ceil(a / step) + 1 >= TICKS_MIN:
            break
    vals = [k * step for k in range(math.ceil(a / step), math.floor(b / step) + 1)]
    return [(v, _tick_text(v, step)) for v in vals] if len(vals) >= len(best) else best


def _scatter(rows: list[dict]) -> str:
    pts = [(r["step_time_s"], r[k]) for r in rows for k in ("predicted_before_s", "predicted_after_s", "loo_predicted_s")
           if r.get(k)]
    vals = [v for p in pts for v in p if v and v > 0]
    lo, hi = math.log10(min(vals) / 1.25), math.log10(max(vals) * 1.25)
    if hi - lo < 0.3:
        mid = (hi + lo) / 2
        lo, hi = mid - 0.15, mid + 0.15

    def x(v: float) -> float:
        return PAD + (math.log10(v) - lo) / (hi - lo) * (W - PAD - 12)

    def y(v: float) -> float:
        return H - PAD - (math.log10(v) - lo) / (hi - lo) * (H - PAD - 12)

    out = [f'<svg width="{W}" height="{H}" role="img" aria-label="measured against predicted step time">',
           f'<rect x="{PAD}" y="12" width="{W - PAD - 12}" height="{H - PAD - 12}" fill="#fafafa" stroke="#ccc"/>']
    band = [(10 ** lo, 10 ** lo * 1.1), (10 ** hi / 1.1, 10 ** hi), (10 ** hi, 10 ** hi / 1.1), (10 ** lo * 1.1, 10 ** lo)]
    out.append('<polygon fill="#e8f0e8" points="' + " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in band) + '"/>')
    out.append(f'<line x1="{x(10 ** lo):.1f}" y1="{y(10 ** lo):.1f}" x2="{x(10 ** hi):.1f}" y2="{y(10 ** hi):.1f}" '
               'stroke="#888" stroke-dasharray="4 3"/>')
    for v, label in ticks(lo, hi):      # a grid line, a tick mark and a label on both axes
        out.append(f'<line x1="{x(v):.1f}" y1="12" x2="{x(v):.1f}" y2="{H - PAD + 4}" stroke="#e4e4e4"/>'
                   f'<line x1="{PAD - 4}" y1="{y(v):.1f}" x2="{W - 12}" y2="{y(v):.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text class="tick" x="{x(v):.1f}" y="{H - PAD + 16}" text-anchor="middle">{label}</text>')
        out.append(f'<text class="tick" x="{PAD - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{label}</text>')
    out.append(f'<text class="axis" x="{(W + PAD) / 2:.0f}" y="{H - 14}" text-anchor="middle">measured step time (s)</text>')
    out.append(f'<text class="axis" transform="translate(14,{(H - PAD) / 2:.0f}) rotate(-90)" '
               'text-anchor="middle">predicted step time (s)</text>')
    for r in rows:
        m = r["step_time_s"]
        b, a, o = r["predicted_before_s"], r["predicted_after_s"], r.get("loo_predicted_s")
        tip = escape(f"row {r['row']} {r['scenario']}: measured {m:.4g} s, before {b:.4g} s "
                     f"({_fmt_pct(r['error_before_pct'])}), after {a:.4g} s ({_fmt_pct(r['error_after_pct'])}), "
                     f"left out {_fmt_pct(r['loo_error_pct'])}")
        out.append(f'<g><title>{tip}</title>'
                   f'<line x1="{x(m):.1f}" y1="{y(b):.1f}" x2="{x(m):.1f}" y2="{y(a):.1f}" stroke="#bbb"/>'
                   f'<circle cx="{x(m):.1f}" cy="{y(b):.1f}" r="5" fill="white" stroke="{COLORS["before"]}" stroke-width="2"/>')
        if o:
            out.append(f'<path d="M{x(m) - 4:.1f},{y(o) - 4:.1f}l8,8m0,-8l-8,8" stroke="{COLORS["loo"]}" stroke-width="2"/>')
        out.append(f'<circle cx="{x(m):.1f}" cy="{y(a):.1f}" r="4.5" fill="{COLORS["after"]}"/></g>')
    out.append("</svg>")
    return "".join(out)


def _factors(doc: dict) -> str:
    shipped = doc["shipped_calibration"]["factors"]
    lines = ["<table><tr><th>factor</th><th>shipped</th><th>profile</th><th>change</th><th>identifiable range</th>"
             "<th>why</th></tr>"]
    for k, v in doc["factors"].items():
        if k in doc["fitted"]:
            lo, hi = doc["ranges"][k]
            change = 100 * (v / shipped[k] - 1)
            cls = MOVE_CLASS[move_size(shipped[k], v)]      # by the size of the move, never its sign
            why = "fitted to the rows"
            rng = f"{lo:.3g} – {hi:.3g}"
            lines.append(f'<tr><td>{escape(k)}</td><td>{shipped[k]:.3g}</td><td><b>{v:.3g}</b></td>'
                         f'<td class="{cls}">{change:+.1f} %</td><td>{rng}</td><td>{why}</td></tr>')
        else:
            lines.append(f"<tr><td>{escape(k)}</td><td>{shipped[k]:.3g}</td><td>{v:.3g}</td><td>kept</td><td>–</td>"
                         f"<td style='text-align:left;white-space:normal'>{escape(doc['kept'][k]['why'])}</td></tr>")
    return "".join(lines) + "</table>" + (
        f'<p class="note">change: grey within x {MOVE_SMALL:g} of the shipped value either way (about the spread '
        f'between releases of the published figures), <span class="moved">amber</span> up to x {MOVE_LARGE:g}, '
        f'<span class="moved-far">red</span> beyond: how far the rows pull a factor from the published fit, not '
        f'whether that is good (a large move is worth a look at the rows)</p>')


def _rows(doc: dict) -> str:
    head = ("<table class='sortable rows'><tr><th>row</th><th>scenario</th><th>instances</th><th>layout</th>"
            "<th>measured</th><th>measured step (s)</th><th>before (s)</th><th>error</th><th>after (s)</th>"
            "<th>error</th><th>left out (s)</th><th>error</th><th>note</th></tr>")
    body = []
    for r in doc["rows"]:
        loo = f"{r['loo_predicted_s']:.4g}" if r.get("loo_predicted_s") else "–"
        name = r["scenario"].replace("\\", "/").rsplit("/", 1)[-1]
        body.append(f"<tr><td>{r['row']}</td><td class='path' title='{escape(r['scenario'])}'>{escape(name)}</td>"
                    f"<td class='name'>{r['instances']} x "
                    f"{escape(r['instance'])}</td><td class='name'>{escape(r['layout'])}</td><td class='name'>"
                    f"{escape(r['measured'])} {r['value']:g}</td><td>{r['step_time_s']:.4g}</td>"
                    f"<td>{r['predicted_before_s']:.4g}</td>"
                    f"<td>{_fmt_pct(r['error_before_pct'])}</td><td>{r['predicted_after_s']:.4g}</td>"
                    f"<td>{_fmt_pct(r['error_after_pct'])}</td><td>{loo}</td><td>{_fmt_pct(r['loo_error_pct'])}</td>"
                    f"<td class='wrap'>{escape(r['note'] or '')}"
                    f"{escape(' (pair ' + r['pair'] + ': ratio only)') if r['pair'] else ''}</td></tr>")
    return head + "".join(body) + "</table>"


def render(doc: dict) -> str:
    ev = doc["evidence"]
    loo = (f"Leave-one-out over {ev['loo_terms']} scenario(s): median |error| {ev['loo_median_abs_pct']:.1f} %, worst "
           f"{ev['loo_worst_abs_pct']:.1f} %." if ev["loo_terms"] else "No scenario could be left out.")
    legend = "".join(f'<span><i style="background:{c}"></i>{n}</span>' for n, c in
                     (("shipped fit (before)", COLORS["before"]), ("this profile (after)", COLORS["after"]),
                      ("left out of the fit", COLORS["loo"])))
    return kit.page("calibration profile", f"""<h1>Calibration profile</h1>
<p>{len(doc['rows'])} measured row(s) from <code>{escape(doc['measurements'])}</code> on
{escape(', '.join(doc['hardware']['instance_types']))}. {escape(loo)} The 80 % interval of a prediction with this
profile is ±{ev['half_width_pct']:.1f} %. Checksum <code>{escape(doc['checksum'])}</code>.</p>
<h2>Factors</h2>{_factors(doc)}
<h2>Measured against predicted</h2>
<p class="legend">{legend}<span><i style="background:#e8f0e8"></i>within 10 %</span></p>
<div class="wide">{_scatter(doc['rows'])}</div>
<h2>Rows</h2><p class="note">Error: predicted step time / measured - 1. A pair's rows enter the fit only as the
ratio of their per-instance throughputs.</p><div class="wide">{_rows(doc)}</div>
<h2>Software</h2><p>{escape('; '.join(doc['software']['notes']) or 'no notes given')}</p>""", MOVE_CSS + ROWS_CSS)
