"""A profile → the terminal's text, the files (PROFILE.json and calibrate.html beside it, written atomically), and
`--check`: the profile re-verified against its own rows."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..calibration import profile as fmt
from ..report.atomic import atomic_write_text
from .fit import CANDIDATES, Timing, jacobian_at, penalties, residuals, shipped_factors, terms_of

UNITS = {"in_graph_sync_s": (1e3, " ms")}
REPREDICT_RTOL = 1e-9        # the replay is deterministic: a profile's rows re-predict to float noise
FIT_TOLERANCE = 0.005        # a fitted factor whose Gauss-Newton step from the profile is larger is not the fit


def _value(name: str, v: float) -> str:
    scale, unit = UNITS.get(name, (1.0, ""))
    return f"{v * scale:.3g}{unit}"


def html_path(out: str | Path) -> Path:
    return Path(out).with_name("calibrate.html")


def write_profile(doc: dict, out: str | Path) -> tuple[Path, Path]:
    """PROFILE.json and calibrate.html beside it (the page first: the profile's presence marks a finished
    calibration)."""
    from .html import render

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    page = atomic_write_text(html_path(out), render(doc))
    return atomic_write_text(out, json.dumps(doc, indent=1, allow_nan=False) + "\n"), page


def _pct(v) -> str:
    return "–" if v is None else f"{v:+.1f} %"


def format_text(doc: dict, wall_s: float | None = None, timed: int | None = None) -> str:
    """The terminal's text: the factors (moved or kept, and why), each row before and after with its leave-one-out
    error, and the evidence the intervals will use."""
    rows = doc["rows"]
    scen = len({r["scenario"] for r in rows})
    head = f"calibrated {len(rows)} row(s) of {scen} scenario(s)"
    if wall_s is not None:
        head += f" in {wall_s:.1f} s" + (f" ({timed} factor settings timed)" if timed is not None else "")
    lines = [head, "", "factors (shipped -> profile):"]
    w = max(len(k) for k in doc["factors"])
    for k, v in doc["factors"].items():
        ship = doc["shipped_calibration"]["factors"][k]
        if k in doc["fitted"]:
            lo, hi = doc["ranges"][k]
            lines.append(f"  {k:<{w}}  {_value(k, ship)} -> {_value(k, v)} ({100 * (v / ship - 1):+.1f} %), "
                         f"identifiable {_value(k, lo)} – {_value(k, hi)}")
        else:
            lines.append(f"  {k:<{w}}  {_value(k, v)} kept at the shipped fit: {doc['kept'][k]['why']}")
    lines += ["", "rows (step time; error = predicted / measured - 1):"]
    name_w = min(40, max(len(Path(r["scenario"]).name) for r in rows))
    lines.append(f"  {'row':>4}  {'scenario':<{name_w}}  {'measured':>10}  {'before':>9}  {'after':>9}  "
                 f"{'left out':>9}")
    for r in rows:
        name = Path(r["scenario"]).name
        name = name if len(name) <= name_w else name[:name_w - 1] + "…"
        pair = f"  (pair {r['pair']}: ratio only)" if r["pair"] else ""
        lines.append(f"  {r['row']:>4}  {name:<{name_w}}  {r['step_time_s']:>9.4g}s  {_pct(r['error_before_pct']):>9}  "
                     f"{_pct(r['error_after_pct']):>9}  {_pct(r['loo_error_pct']):>9}{pair}")
    for t in doc["terms"]:
        if t["kind"] == "scaling":
            lines.append(f"  scaling {Path(t['scenarios'][1]).name} / {Path(t['scenarios'][0]).name} (rows "
                         f"{', '.join(map(str, t['rows']))}): per-instance ratio {_pct(t['error_before_pct'])} before, "
                         f"{_pct(t['error_after_pct'])} after")
    ev = doc["evidence"]
    if ev["loo_terms"]:
        lines += ["", f"leave-one-out over {ev['loo_terms']} scenario(s): median |error| {ev['loo_median_abs_pct']:.1f} %, "
                      f"worst {ev['loo_worst_abs_pct']:.1f} % (each scenario predicted from a fit without its rows)"]
    for gen, d in (doc.get("domain") or {}).items():
        rng = lambda a: f"{a[0]:g}" if a[0] == a[1] else f"{a[0]:g}–{a[1]:g}"   # noqa: E731
        lines.append(f"domain ({gen}): tp {rng(d['tp'])}, pp {rng(d['pp'])}, cp {rng(d['cp'])}, sequence "
                     f"{rng(d['seq_len'])}, {rng([round(x, 1) for x in d['params_b']])} B parameters, ZeRO "
                     f"{', '.join(map(str, d['zero']))}, recompute {', '.join(d['recompute'])}: a run outside "
                     "gets a wider interval")
    lines.append(f"80 % interval of a prediction with this profile: ±{ev['half_width_pct']:.1f} % on its rows' chips "
                 f"(fit {100 * ev['fit_log']:.1f} %, between runs {100 * ev['release_sigma']:.1f} %; "
                 f"docs/uncertainty.md)")
    return "\n".join(lines)


def _rows_as_measured(doc: dict):
    """The profile's rows as measured rows (their inlined scenarios validated again)."""
    from ..errors import ScenarioError
    from ..scenario import load_scenario
    from .measurements import Row

    out, problems = [], []
    for r in doc["rows"]:
        try:
            sc = load_scenario(r["scenario_resolved"])
        except ScenarioError as err:
            problems += [f"row {r['row']}: its scenario no longer validates: {p}" for p in err.problems[:3]]
            continue
        except (KeyError, TypeError) as exc:
            problems.append(f"row {r['row']}: damaged ({exc})")
            continue
        out.append(Row(r["row"], f"row {r['row']}", r["scenario"], Path(r["scenario"]), sc, r["measured"],
                       float(r["value"]), float(r["step_time_s"]), r.get("note") or "", r.get("pair") or ""))
    return out, problems


def check_profile(path: str | Path) -> tuple[dict, list[str]]:
    """Re-verify a profile: read it (ProfileError when unreadable, damaged or edited), then re-predict its rows with
    its factors, check each recorded figure against them, and check that the fitted factors are still the fit of
    the rows (a Gauss-Newton step from them moves no factor by more than FIT_TOLERANCE). Returns the profile and
    every problem found (none: it verifies)."""
    from .command import scenario_rows_of, replay_rows

    doc = fmt.read_profile(path)
    rows, problems = _rows_as_measured(doc)
    if problems:
        return doc, problems
    base = fmt.calibration_of(doc)
    rows_by_scenario = scenario_rows_of(rows)
    steps = {}
    for key, g in rows_by_scenario.items():
        s = replay_rows(g.scenario, base)
        steps[key] = s["step_time_s"]
    for r, rec in zip(rows, doc["rows"]):
        quantity = {"step_time_s": r.value, "seq_per_s": r.scenario.training.global_batch / r.value,
                    "tokens_per_s": r.scenario.tokens_per_step / r.value}[r.measured]
        if not math.isclose(quantity, r.step_time_s, rel_tol=1e-12):
            problems.append(f"row {r.number}: step_time_s {r.step_time_s} is not what {r.measured} = {r.value} gives "
                            f"({quantity})")
        got = steps[str(r.path)]
        if not math.isclose(got, rec["predicted_after_s"], rel_tol=REPREDICT_RTOL):
            problems.append(f"row {r.number} ({r.scenario_path}): the profile's factors predict {got:.6g} s, the "
                            f"profile says {rec['predicted_after_s']:.6g} s: the model changed since the profile was "
                            "fitted; recalibrate from the measurements")
    if problems:
        return doc, problems
    problems += _still_the_fit(doc, rows_by_scenario, base, steps)
    return doc, problems


def _still_the_fit(doc: dict, rows_by_scenario, base, steps: dict[str, float]) -> list[str]:
    """The fitted factors minimise the profile's loss over its rows: one Gauss-Newton step from them (fast-path
    Jacobian, corrected to the replays) moves none of them by more than FIT_TOLERANCE."""
    from ..layouts.setting_times import setting_step_times

    free = list(doc["fitted"])
    if not free:
        return []
    correction = {k: math.log(steps[k] / float(setting_step_times(g.scenario, [base])[0])) for k, g in rows_by_scenario.items()}
    timing = Timing(rows_by_scenario, base, correction)
    terms = terms_of(rows_by_scenario)
    point = {k: float(v) for k, v in doc["factors"].items()}
    jac = jacobian_at(point, rows_by_scenario, terms, timing, free)
    r = residuals(terms, rows_by_scenario, {k: math.log(v) for k, v in steps.items()})
    shipped = doc["shipped_calibration"]["factors"]
    u = np.array([math.log(point[k]) for k in free])
    u0 = np.array([math.log(shipped[k]) for k in free])
    pen = penalties(free, shipped)
    step = np.linalg.solve(jac.T @ jac + np.diag(np.maximum(pen, 1e-9)), -(jac.T @ r + pen * (u - u0)))
    out = []
    for k, s in zip(free, step):
        lo, hi = CANDIDATES[k]
        at_bound = (s > 0 and point[k] >= hi * 0.999) or (s < 0 and point[k] <= lo * 1.001)
        if abs(s) > FIT_TOLERANCE and not at_bound:
            out.append(f"factors: {k} = {point[k]:.6g} is not the fit of the profile's rows (the fit moves it by "
                       f"{100 * math.expm1(s):+.1f} %): the factors were changed after fitting; recalibrate")
    if shipped != shipped_factors():
        out.append("shipped_calibration: the profile was regularised toward another shipped fit "
                   f"({shipped}) than this ultracluster's ({shipped_factors()}); recalibrate to use this version's")
    return out
