"""Named calibration factors: achieved fractions of peak that the public hardware numbers do not give.

Every factor here is a physical, named quantity, fitted only to the published rows of
`../shared/calibration/` by `scripts/calibrate.py` (see `docs/calibration.md`), or, where the data say
nothing about it, an explicit documented assumption. A scenario never silently changes them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path


@dataclass(frozen=True)
class Calibration:
    """Achieved fractions of peak and fixed costs.

    Attributes:
        tensor_efficiency: achieved fraction of TensorE peak on large, well-tiled matmuls.
        vector_efficiency: achieved fraction of VectorE/ScalarE peak on elementwise and reduction work.
        hbm_efficiency: achieved fraction of HBM bandwidth on streaming operators.
        op_overhead_s: fixed cost of one operator instance on a NeuronCore (instruction issue, semaphore
            waits, DMA descriptor set-up) added to its roofline time.
        step_overhead_s: fixed per-step host/runtime cost (launch, sync) on the critical path.
        compute_jitter: sigma of the log-normal per-rank, per-step compute-time noise (assumption: not
            published; 1 %; a scenario sets its own with faults.jitter).
        runtime_reserve_gib: HBM per rank kept by the Neuron runtime and compiler scratch (assumption: not
            published; 1 GiB per rank).
    """

    tensor_efficiency: float = 0.75
    vector_efficiency: float = 0.6
    hbm_efficiency: float = 0.8
    op_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    runtime_reserve_gib: float = 1.0
    compute_jitter: float = 0.01

    def with_(self, **changes: float) -> "Calibration":
        return replace(self, **changes)


FITTED = Path(__file__).with_name("calibration.json")   # written by scripts/calibrate.py


def fitted() -> Calibration:
    """The documented defaults with the factors fitted by scripts/calibrate.py applied."""
    if not FITTED.exists():
        return Calibration()
    values = json.loads(FITTED.read_text())
    return Calibration(**{f.name: values[f.name] for f in fields(Calibration) if f.name in values})


DEFAULT = fitted()
