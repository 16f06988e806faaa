"""Named calibration factors: achieved fractions of peak and fixed costs that the public hardware numbers do
not give, for the chip model and for the collective model, in one `Calibration` that travels in the Cluster.

Every factor is a physical, named quantity, fitted only to the published rows of `data/calibration/`
(`scripts/calibrate.py` for the chip, `scripts/fit_collectives.py` for the collectives; see
`docs/calibration.md` and `docs/collectives.md`), or, where the data say nothing about it, an explicit
documented assumption. A scenario never silently changes them. The fitted files are part of the package: a
missing one is an error, never a silent fall-back to defaults.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

TRN1, TRN2 = "trainium", "trainium2"

FITTED = Path(__file__).with_name("calibration.json")                                  # scripts/calibrate.py
NETWORK_FITTED = Path(__file__).parents[1] / "network" / "collectives_fit.json"       # scripts/fit_collectives.py


class CalibrationMissing(RuntimeError):
    """A fitted calibration file of the package is missing or unreadable."""


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


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CalibrationMissing(f"{path}: the fitted calibration cannot be read ({exc}); regenerate it with "
                                 f"the fitting script named in docs/calibration.md") from exc


def fitted_network() -> NetworkCalibration:
    """The factors of `network/collectives_fit.json` (an error where it is missing)."""
    values = _read(NETWORK_FITTED)["factors"]
    return NetworkCalibration(**{f.name: float(values[f.name]) for f in fields(NetworkCalibration)
                                 if f.name in values})


NETWORK_DEFAULT = fitted_network()


@dataclass(frozen=True)
class Calibration:
    """Achieved fractions of peak and fixed costs of the chip model, and the collective model's factors.

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
        network: the collective model's factors.
    """

    tensor_efficiency: float = 0.75
    vector_efficiency: float = 0.6
    hbm_efficiency: float = 0.8
    op_overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    runtime_reserve_gib: float = 1.0
    compute_jitter: float = 0.01
    network: NetworkCalibration = field(default_factory=lambda: NETWORK_DEFAULT)

    def with_(self, **changes) -> "Calibration":
        """A copy with chip factors changed; network factors are given as `network=...` or by their names."""
        net = {k: changes.pop(k) for k in list(changes) if k in _NETWORK_FIELDS}
        if net:
            changes["network"] = changes.get("network", self.network).with_(**net)
        return replace(self, **changes)


_NETWORK_FIELDS = {f.name for f in fields(NetworkCalibration)}


def fitted() -> Calibration:
    """The documented defaults with the factors fitted by scripts/calibrate.py and fit_collectives.py."""
    values = _read(FITTED)
    return Calibration(**{f.name: values[f.name] for f in fields(Calibration) if f.name in values and f.name != "network"},
                       network=NETWORK_DEFAULT)


DEFAULT = fitted()
