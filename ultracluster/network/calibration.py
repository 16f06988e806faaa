"""Named calibration factors of the collective model, fitted only to ../shared/calibration/collectives.csv.

`scripts/fit_collectives.py` fits them, writes `collectives_fit.json` next to this module and regenerates
`docs/collectives.md` (every row: prediction, measurement, error); `tests/network/test_fit.py` recomputes
the fit and fails when either file is stale. Bandwidth factors are achieved fractions of a public peak
(the catalog's); time factors are fixed software costs that no public figure gives. Trn1 (Trainium,
NeuronLink-v2) and Trn2 (Trainium2, NeuronLink-v3) have their own link efficiency and launch cost: they
are different hardware and runtime generations, and the published measurements differ accordingly.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

FITTED = Path(__file__).with_name("collectives_fit.json")
TRN1, TRN2 = "trainium", "trainium2"


@dataclass(frozen=True)
class NetworkCalibration:
    """Achieved fractions of link peaks and fixed costs of the collective model.

    Attributes:
        neuronlink_efficiency_trn1: achieved fraction of a NeuronLink-v2 port's bandwidth (Trn1).
        neuronlink_efficiency_trn2: achieved fraction of a NeuronLink-v3 port's (and Z port's) bandwidth (Trn2).
        chip_efficiency: achieved fraction of a chip's DMA bandwidth for data moved between the NeuronCores
            of that chip (the reduction's extra HBM passes included).
        efa_efficiency: achieved fraction of an EFA NIC's bandwidth.
        launch_s_trn1: fixed cost of one collective on Trn1 (runtime launch, final synchronisation).
        launch_s_trn2: the same on Trn2.
        reduce_step_s: fixed cost of one reducing step of a collective inside one instance (the received
            chunk is summed by the collective engine before the next step may start); gather steps cost
            their wire latency only.
        efa_step_s: fixed cost of every step of a collective that spans instances over EFA (its steps,
            the intra-instance ones included, are sequenced through the runtime's network proxy).
    """

    neuronlink_efficiency_trn1: float = 0.66
    neuronlink_efficiency_trn2: float = 0.16
    chip_efficiency: float = 0.12
    efa_efficiency: float = 0.41
    launch_s_trn1: float = 6e-6
    launch_s_trn2: float = 460e-6
    reduce_step_s: float = 43e-6
    efa_step_s: float = 97e-6

    def neuronlink_efficiency(self, generation: str) -> float:
        """The NeuronLink efficiency of a chip generation ("trainium" or "trainium2")."""
        return self.neuronlink_efficiency_trn2 if generation == TRN2 else self.neuronlink_efficiency_trn1

    def launch_s(self, generation: str) -> float:
        """The launch cost of one collective on a chip generation."""
        return self.launch_s_trn2 if generation == TRN2 else self.launch_s_trn1

    def with_(self, **changes: float) -> "NetworkCalibration":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def fitted() -> NetworkCalibration:
    """The factors of `collectives_fit.json` (the documented defaults where it is missing)."""
    if not FITTED.exists():
        return NetworkCalibration()
    values = json.loads(FITTED.read_text())["factors"]
    return NetworkCalibration(**{f.name: float(values[f.name]) for f in fields(NetworkCalibration)
                                 if f.name in values})


DEFAULT = fitted()
