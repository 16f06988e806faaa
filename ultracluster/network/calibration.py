"""The collective model's named factors, fitted only to data/calibration/collectives.csv.

`scripts/fit_collectives.py` fits them, writes `collectives_fit.json` next to this module and regenerates
`docs/collectives.md` (every row: prediction, measurement, error); `tests/network/test_collective_fit.py`
recomputes the fit and fails when either file is stale. Bandwidth factors are achieved fractions of a public
peak (the catalog's); time factors are fixed software costs that no public figure gives. The dataclass lives
with the chip factors in `ultracluster.calibration.factors` (one `Calibration` travels in the Cluster); this
module names the network part. `DEFAULT` is the fitted factors, read on first access (`calibration.fitted_files`).
"""
from __future__ import annotations

from typing import Any

from ..calibration.factors import TRN1, TRN2, NetworkCalibration
from ..calibration.fitted_files import NETWORK_FITTED as FITTED, fitted_network as fitted

__all__ = ["DEFAULT", "FITTED", "NetworkCalibration", "TRN1", "TRN2", "fitted"]


def __getattr__(name: str) -> Any:
    if name == "DEFAULT":
        return fitted()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
