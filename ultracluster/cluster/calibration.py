"""Named calibration factors: achieved fractions of peak that the public hardware numbers do not give.

Every factor here is a physical, named quantity, fitted only to the published rows of
`../shared/calibration/` by `scripts/calibrate.py` (see `docs/calibration.md`), or, where the data say
nothing about it, an explicit documented assumption. A scenario never silently changes them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Calibration:
    """Achieved fractions of peak and fixed costs.

    Attributes:
        tensor_efficiency: achieved fraction of TensorE peak on large, well-tiled matmuls.
        vector_efficiency: achieved fraction of VectorE/ScalarE peak on elementwise and reduction work.
        hbm_efficiency: achieved fraction of HBM bandwidth on streaming operators.
        neuronlink_efficiency: achieved fraction of NeuronLink bandwidth in collectives.
        efa_efficiency: achieved fraction of EFA bandwidth in collectives and sends.
        step_overhead_s: fixed per-step host/runtime cost (launch, sync) on the critical path.
        runtime_reserve_gib: HBM per rank kept by the Neuron runtime and compiler scratch (assumption: not
            published; 1 GiB per rank).
    """

    tensor_efficiency: float = 0.75
    vector_efficiency: float = 0.6
    hbm_efficiency: float = 0.8
    neuronlink_efficiency: float = 0.8
    efa_efficiency: float = 0.8
    step_overhead_s: float = 0.0
    runtime_reserve_gib: float = 1.0

    def with_(self, **changes: float) -> "Calibration":
        return replace(self, **changes)


DEFAULT = Calibration()
