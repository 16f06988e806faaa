"""The fitted calibration: the package's fitted files (`calibration/calibration.json`, written by
`scripts/calibrate.py`; `network/collectives_fit.json`, by `scripts/fit_collectives.py`) read into the factor
types of `calibration.factors`.

The fitted files are part of the package: a missing or damaged one is an error naming it, never a silent fall-back
to defaults. Nothing is read at import: `load_fitted()` reads both files on first use, once per process, and builds
what comes from them (the fitted `Calibration`, the named collective calibrations, each file's content), frozen;
this is the one place the package reads them. `DEFAULT`, `NETWORK_DEFAULT` and `NETWORK_CALIBRATIONS` are its values,
looked up on first access (PEP 562), so `import ultracluster.chip` works even where a file is broken. The ranges
of the factors the files do not pin are built from them by `uncertain_factors`.
"""
from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import UltraclusterError
from .factors import NETWORK_FIELDS, Calibration, NetworkCalibration

FITTED = Path(__file__).with_name("calibration.json")                                  # scripts/calibrate.py
NETWORK_FITTED = Path(__file__).parents[1] / "network" / "collectives_fit.json"       # scripts/fit_collectives.py


class CalibrationMissing(UltraclusterError, RuntimeError):
    """A fitted calibration file of the package is missing, unreadable or damaged; the message names it."""


REGENERATE = "regenerate it with the fitting script named in docs/calibration.md"


def _read(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CalibrationMissing(f"{path}: the fitted calibration cannot be read ({exc}); {REGENERATE}") from exc
    if not isinstance(doc, dict):
        raise CalibrationMissing(f"{path}: the fitted calibration is damaged (a JSON {type(doc).__name__}, not an "
                                 f"object); {REGENERATE}")
    return doc


@contextmanager
def damaged(path: Path) -> Iterator[None]:
    """A file whose content does not have the shape the model reads is damaged: an error naming it."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CalibrationMissing(f"{path}: the fitted calibration is damaged ({type(exc).__name__}: {exc}); "
                                 f"{REGENERATE}") from exc


def _number(value: Any, name: str, kind: type = float) -> Any:
    """A fitted value of the field's type (a bool switch, or a finite number), else the file is damaged."""
    ok = isinstance(value, bool) if kind is bool else \
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok:
        raise ValueError(f"{name} is {value!r}, not a {'true/false switch' if kind is bool else 'finite number'}")
    return value


# Trn3 has no measured collective: its factors take the Trn1 fit's values (measured on a current Neuron
# release; Trn2's default is the Trn1 value too) unless the fitted file gives its own.
BORROWED_TRN3 = {"neuronlink_efficiency_trn3": "neuronlink_efficiency_trn1", "launch_s_trn3": "launch_s_trn1"}


def _fitted_network(doc: dict) -> NetworkCalibration:
    """The factors of `network/collectives_fit.json`."""
    values = dict(doc["factors"])
    for trn3, source in BORROWED_TRN3.items():
        if source in values:
            values.setdefault(trn3, values[source])
    return NetworkCalibration(**{f.name: float(_number(values[f.name], f.name)) for f in fields(NetworkCalibration)
                                 if f.name in values})


def fitted_network() -> NetworkCalibration:
    """The factors of `network/collectives_fit.json` (an error naming it where it is missing or damaged)."""
    return load_fitted().network


def _network_calibrations(doc: dict) -> Mapping[str, Mapping[str, float]]:
    profiles = doc.get("profiles", {})
    return MappingProxyType({"default": MappingProxyType({}), **{
        name: MappingProxyType({k: float(_number(v, f"profiles.{name}.{k}")) for k, v in changes.items()})
        for name, changes in profiles.items()}})


def network_calibrations() -> Mapping[str, Mapping[str, float]]:
    """Named collective calibrations: name -> the factors it changes from the default ("default": none).

    `trn2-nccom-examples` fits the Trn2 NeuronLink efficiency and launch cost to the four dated Trn2
    nccom-test examples of collectives.csv (the reading before issue 13; the pessimistic end of Trn2).
    A scenario picks one with `cluster.network.calibration`, `ultracluster collectives` with `--calibration`.
    """
    return load_fitted().network_calibrations


def with_network_calibration(calibration: Calibration, name: str) -> Calibration:
    """`calibration` with the collective factors of a named collective calibration (`NETWORK_CALIBRATIONS`) applied on top.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    named = network_calibrations()
    if name not in named:
        raise ValueError(f"unknown network calibration {name!r}; known: {', '.join(named)}")
    return calibration.with_(**named[name]) if named[name] else calibration


def _fitted_calibration(doc: dict, network: NetworkCalibration) -> Calibration:
    """The chip fit's factors on the collective fit's; a collective factor fitted to the training rows
    (`in_graph_sync_s`) comes with the chip fit and goes into its network part."""
    network = network.with_(**{k: float(_number(doc[k], k)) for k in NETWORK_FIELDS if k in doc})
    return Calibration(**{f.name: _number(doc[f.name], f.name, bool if f.type in ("bool", bool) else float)
                          for f in fields(Calibration) if f.name in doc and f.name != "network"}, network=network)


def fitted() -> Calibration:
    """The documented defaults with the factors fitted by scripts/calibrate.py and fit_collectives.py."""
    return load_fitted().calibration


@dataclass(frozen=True)
class Fitted:
    """Everything the package's fitted files give, frozen (`load_fitted`).

    Attributes:
        calibration: the fitted `Calibration` (`DEFAULT`).
        network: its collective factors (`NETWORK_DEFAULT`).
        network_calibrations: the named collective calibrations (`NETWORK_CALIBRATIONS`, `network_calibrations`).
        documents: each file's parsed content by file name ("calibration.json", "collectives_fit.json"):
            the fit's own evidence (`ultracluster.uncertainty.evidence`) and what the uncertain factors' ranges
            are built from (`uncertain_factors`); read it, never change it.
    """

    calibration: Calibration
    network: NetworkCalibration
    network_calibrations: Mapping[str, Mapping[str, float]]
    documents: Mapping[str, dict]


@lru_cache(maxsize=1)
def load_fitted() -> Fitted:
    """Read the fitted files (`network/collectives_fit.json`, `calibration/calibration.json`) on first use, once per
    process: the one place the package reads them.

    Raises:
        CalibrationMissing: a file is missing, unreadable, not JSON, or lacks or mistypes a value the model
            reads; the message names the file and how to regenerate it.
    """
    net_doc, chip_doc = _read(NETWORK_FITTED), _read(FITTED)
    with damaged(NETWORK_FITTED):
        network, named = _fitted_network(net_doc), _network_calibrations(net_doc)
    with damaged(FITTED):
        calibration = _fitted_calibration(chip_doc, network)
    network = calibration.network        # with the collective factor the training rows fit (in_graph_sync_s)
    return Fitted(calibration=calibration, network=network, network_calibrations=named,
                  documents=MappingProxyType({FITTED.name: chip_doc, NETWORK_FITTED.name: net_doc}))


def fitted_document() -> dict:
    """The committed chip fit, calibration.json, as read by `load_fitted` (its layouts, cross-validation, the
    Trainium2 row, the calibrated domain): a deep copy, the caller's own (about 0.6 ms; a run asks a few times),
    so that changing it changes nothing the process shares."""
    return copy.deepcopy(load_fitted().documents[FITTED.name])


def fitted_read() -> dict:
    """calibration.json as `fitted_document` gives it, not copied, for a caller that only reads it (a copy is about
    0.5 ms; one run's interval asked for a dozen)."""
    return load_fitted().documents[FITTED.name]


_LAZY = {"DEFAULT": "calibration", "NETWORK_DEFAULT": "network", "NETWORK_CALIBRATIONS": "network_calibrations"}


def __getattr__(name: str) -> Any:
    """`DEFAULT`, `NETWORK_DEFAULT`, `NETWORK_CALIBRATIONS`: `load_fitted()`'s values, read on first access."""
    if name in _LAZY:
        return getattr(load_fitted(), _LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
