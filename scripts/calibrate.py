#!/usr/bin/env python3
"""Fit the chip model's calibration factors to the published training runs; cross-validate, ablate, and
write the tables.

Fits only to `data/calibration/training.csv` (the project's rule). Rows are grouped by `layout`; each
layout's target is the median `seq_per_s` over the Neuron releases that published it, and only layouts whose
`quality` is not `uncertain` are fitted. For each layout the scenario is built from its row's own columns and
predicted in-process (`ultracluster.runner.predict`, no Ray).

The fitted factors (FIT) minimise the sum over layouts of log(predicted / median)^2, by bounded least
squares (`scipy.optimize.least_squares`) from fixed starts inside each factor's physical bounds; every other factor keeps the value
`ultracluster/calibration/factors.py` documents (ASSUMED lists those set from a source or an argument). The
script then reports:

- leave-one-layout-out cross-validation: refit without each layout, predict it;
- identifiability: for each fitted factor, the range over which the RMS log error stays within
  sqrt(best^2 + spread^2) (spread: the RMS between-release spread of the layouts), the other factors held at
  their fit, and how a fixed set of Trn2 scenarios moves across that range;
- ablation: each mechanism switched off in turn and the factors refitted: the error per layout.

Writes `ultracluster/calibration/calibration.json`, `docs/calibration.md`, `scenarios/calib-*.yaml` and
`data/calibration/measurements.csv` (the public rows as `ultracluster calibrate` reads them). `--check` recomputes and exits 1
when either file is stale (the full cross-validation takes a few minutes; the test suite checks the cheap
parts, see tests/chip/test_calibration.py).

The fitting code lives in the package (`ultracluster.calibrate.training`, `.shipped`, `.page`); this script runs
it and writes the files.

Usage: python scripts/calibrate.py [--check] [--data DIR]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ultracluster.calibrate.page import measurements_file, outputs, scenario_files, splice  # noqa: E402
from ultracluster.calibrate.training import DATA, DOC, FITTED  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed fit is stale")
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    fitted, section = outputs(args.data)
    doc = splice(DOC.read_text() if DOC.exists() else "", section)
    files = {FITTED: fitted, DOC: doc, **scenario_files(args.data), **measurements_file(args.data)}
    if args.check:
        stale = [p.name for p, text in files.items() if not p.exists() or p.read_text() != text]
        print("stale: " + ", ".join(stale) if stale else "calibration is up to date")
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text)
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
