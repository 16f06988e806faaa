"""`ultracluster calibrate`: fit the model's free factors to measured step times.

- `training`, `shipped`, `page`: the shipped calibration, fitted to the published rows of
  `data/calibration/training.csv` (`scripts/calibrate.py` writes `calibration/calibration.json`, the generated part
  of docs/calibration.md and scenarios/calib-*.yaml from them);
- the user's calibration: a measurements file (one row per measured run) → a calibration profile
  (docs/calibration.md, "Your own cluster").

Nothing here is imported by the model: the commands sit above `pipeline`, whose `predict` the fits call.
"""
