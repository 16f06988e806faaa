"""The calibration: the named factors the public hardware numbers do not give (`factors`: `Calibration` and its
collective part `NetworkCalibration`), the fitted files that set them (`fitted_files`: `calibration.json`, written by
`scripts/calibrate.py`, and `network/collectives_fit.json`) and a user's fitted profile (`profile`, `ultracluster
calibrate`). The factors no measurement pins down, with their ranges, are `ultracluster.uncertain_factors` (they read
the catalog too).

Pure and a leaf: it imports nothing of the package but the base (`errors`, `frozen`); the hardware (`cluster`),
the chip and network models and every command read it.
"""
