#!/usr/bin/env python3
"""The golden summaries: the `predict` summary (with its 80 % interval) of every shipped scenario, pinned.

Every scenario in scenarios/ (the shipped ones and the calibration layouts, `calib-*.yaml`) is predicted in
this process (`ultracluster.runner.predict`, no Ray) and its summary written to
`tests/golden/<scenario file stem>.json`. `tests/test_golden.py` recomputes each and fails when a number
moved by more than a relative 1e-9, so every change to the model shows its effect in review: the commit that
moves them regenerates them with this script and says which moved and why.

Usage:
    python scripts/golden.py            # regenerate, print what moved (scenario, key, old, new, change)
    python scripts/golden.py --check    # print what moved; exit 1 when anything did, write nothing
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GOLDEN = REPO / "tests" / "golden"
SCENARIOS = REPO / "scenarios"
REL = 1e-9          # a relative change below this is float noise, not a move
# ... and so is an absolute one below this: a quantity that is zero up to rounding (a hidden time of 7e-15 s
# where the model says 0) comes out as a different few ulps with another numpy's summation order (numpy 2.4
# moved faults-llama3-70b-trn2-sync's dp_comm_hidden_s from 6.7e-15 to 7.1e-15 s); no summary figure
# (seconds, GiB, fractions, dollars) means anything at 1e-12
ABS = 1e-12
# The figures a reviewer reads first; every other numeric key is compared too, and listed when it moves
HEADLINE = ("step_time_s", "step_time_low_s", "step_time_high_s", "mfu", "hbm_peak_gib")


def summary_of(path: Path) -> dict:
    """The predicted summary of one scenario file, as JSON would hold it."""
    from ultracluster.runner import predict

    return json.loads(json.dumps(predict(path, intervals=True), default=str))


def moved(old, new, rel: float = REL, floor: float = ABS) -> bool:
    """Whether two summary values differ beyond float noise (NaN equals NaN): by more than `rel` of the larger
    and more than `floor` absolute."""
    if isinstance(old, bool) or isinstance(new, bool) or not isinstance(old, (int, float)) \
            or not isinstance(new, (int, float)):
        return old != new
    if math.isnan(old) or math.isnan(new):
        return not (math.isnan(old) and math.isnan(new))
    return abs(new - old) > max(rel * max(abs(old), abs(new)), floor)


def changes(old: dict | None, new: dict) -> list[tuple[str, object, object]]:
    """(key, old, new) of every key that moved; a scenario with no golden file moves whole."""
    if old is None:
        return [("(new scenario)", None, new.get("step_time_s"))]
    keys = sorted(set(old) | set(new), key=lambda k: (k not in HEADLINE, HEADLINE.index(k) if k in HEADLINE else 0, k))
    return [(k, old.get(k), new.get(k)) for k in keys if moved(old.get(k), new.get(k))]


def _fmt(v) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="print what moved and exit 1 if anything did")
    args = ap.parse_args(argv)
    files = sorted(SCENARIOS.glob("*.yaml"))
    rows, stale = [], []
    for f in files:
        target = GOLDEN / f"{f.stem}.json"
        old = json.loads(target.read_text()) if target.exists() else None
        new = summary_of(f)
        for key, a, b in changes(old, new):
            change = f"{100 * (b / a - 1):+.2f} %" if isinstance(a, float) and isinstance(b, float) and a else ""
            rows.append((f.stem, key, _fmt(a), _fmt(b), change))
        if not args.check:
            text = json.dumps(new, indent=1, sort_keys=True) + "\n"
            if not target.exists() or target.read_text() != text:
                tmp = target.with_suffix(".json.tmp")
                tmp.write_text(text)
                tmp.replace(target)
    gone = sorted(p.stem for p in GOLDEN.glob("*.json") if not (SCENARIOS / f"{p.stem}.yaml").exists())
    for stem in gone:
        rows.append((stem, "(scenario removed)", "", "", ""))
        stale.append(stem)
        if not args.check:
            (GOLDEN / f"{stem}.json").unlink()
    if not rows:
        print(f"golden summaries: {len(files)} scenarios, nothing moved")
        return 0
    widths = [max(len(str(r[i])) for r in rows + [("scenario", "key", "old", "new", "change")]) for i in range(5)]
    for r in [("scenario", "key", "old", "new", "change")] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    moved_scenarios = len({r[0] for r in rows})
    print(f"golden summaries: {moved_scenarios} of {len(files)} scenarios moved"
          + ("" if args.check else f"; rewritten in {GOLDEN.relative_to(REPO)}/"))
    return 1 if args.check else 0


if __name__ == "__main__":
    sys.exit(main())
