"""The learning curve of `ultracluster calibrate` on the public data: calibrate on the k smallest of the six
fitted Trn1 layouts of data/calibration/measurements.csv (fewest instances, then the smallest model: the runs a
user makes first), each with its published rows, and predict the layouts left out against their published
medians, beside the shipped calibration on the same layouts (benchmarks/calibrate.py, docs/performance.md)."""
from __future__ import annotations

import csv
import statistics
import tempfile
from pathlib import Path

from .training import DATA, REPO

# the layouts the shipped fit fits on Trn1 (calibration.json "fitted"), as the public measurements name them
TRN1_FITTED = ("gpt3-6.7b-tp8", "llama2-7b-tp8", "llama2-7b-tp8-nemo-full", "llama31-8b-tp32", "gpt3-23b-tp8pp4",
               "gpt3-175b-tp32pp8")


def public_rows(data: Path = DATA) -> list[dict]:
    """data/calibration/measurements.csv, each row with its absolute scenario path and its layout."""
    path = Path(data) / "measurements.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["scenario"] = str((path.parent / r["scenario"]).resolve())
        r["layout"] = Path(r["scenario"]).stem.removeprefix("calib-")
    return rows


def small_first(layouts=TRN1_FITTED) -> list[str]:
    """Fewest instances first, then the fewest weights per replica (layers x hidden^2), then the name."""
    from ..scenario import load_scenario

    def size(name: str):
        sc = load_scenario(REPO / "scenarios" / f"calib-{name}.yaml")
        return sc.cluster.instances, sc.model.layers * sc.model.hidden ** 2, name
    return sorted(layouts, key=size)


def write_rows(rows: list[dict], path: Path) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["scenario", "seq_per_s", "note", "pair"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def _step_error(path: str, cal, target_s: float) -> float:
    from ..scenario import load_scenario
    from ..layouts.setting_times import one_step, replayed_step_time

    return 100 * (replayed_step_time(one_step(load_scenario(path)), cal) / target_s - 1)


def learning_curve(data: Path = DATA, ks=(1, 2, 3)) -> list[dict]:
    """Per k: the layouts calibrated on, the factors fitted, and the median and worst |step time error| (%) of the
    layouts left out with the profile, with the shipped fit (which saw them) and the shipped fit's own
    leave-one-layout-out errors (calibration.json)."""
    from ..calibration.fitted_files import fitted, fitted_document
    from ..calibration.profile import calibration_of
    from ..scenario import load_scenario
    from .command import calibrate

    rows = public_rows(data)
    order = small_first()
    layouts = fitted_document()["layouts"]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in ks:
            chosen, held = order[:k], order[k:]
            done = calibrate(write_rows([r for r in rows if r["layout"] in chosen and not r["pair"]],
                                        Path(tmp) / f"k{k}.csv"))
            cal = calibration_of(done.profile)
            errs, shipped, cv = [], [], []
            for name in held:
                mine = [r for r in rows if r["layout"] == name and not r["pair"]]
                target = load_scenario(mine[0]["scenario"]).training.global_batch / statistics.median(
                    float(r["seq_per_s"]) for r in mine)
                errs.append(abs(_step_error(mine[0]["scenario"], cal, target)))
                shipped.append(abs(_step_error(mine[0]["scenario"], fitted(), target)))
                cv.append(abs(100 * (1 / (1 + layouts[name]["cv_error_pct"] / 100) - 1)))
            out.append({"k": k, "calibrated_on": chosen, "fitted": list(done.profile["fitted"]), "predicted": held,
                        "median_pct": statistics.median(errs), "worst_pct": max(errs),
                        "shipped_median_pct": statistics.median(shipped), "shipped_worst_pct": max(shipped),
                        "shipped_loo_median_pct": statistics.median(cv), "shipped_loo_worst_pct": max(cv),
                        "wall_s": done.wall_s})
    return out


def curve_table(curve: list[dict]) -> str:
    """The learning curve as the markdown table docs/performance.md shows."""
    lines = ["| k | calibrated on | fitted | layouts predicted | profile: median / worst | shipped fit, in sample | "
             "shipped fit, left out |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in curve:
        on = c["calibrated_on"][-1] if c["k"] > 1 else c["calibrated_on"][0]
        lines.append(f"| {c['k']} | {'+ ' if c['k'] > 1 else ''}{on} | {', '.join(c['fitted']) or 'none'} | "
                     f"{len(c['predicted'])} | {c['median_pct']:.1f} % / {c['worst_pct']:.1f} % | "
                     f"{c['shipped_median_pct']:.1f} % / {c['shipped_worst_pct']:.1f} % | "
                     f"{c['shipped_loo_median_pct']:.1f} % / {c['shipped_loo_worst_pct']:.1f} % |")
    return "\n".join(lines) + "\n"
