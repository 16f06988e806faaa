"""Calibration profiles: the factors `ultracluster calibrate` fitted to a user's measured runs, as a file.

A profile is JSON (docs/calibration.md, "Your own cluster"): its format name and version, the factors, the rows
it was fitted to (each with its scenario inlined, so the profile re-verifies anywhere), each row's leave-one-out
error, the evidence the 80 % interval reads, and a checksum over all of it. This module reads and checks one
(`verify`, `read_profile`) and turns it into what the model uses (`calibration_of`, `evidence_of`); the fit
itself is `ultracluster.calibrate`, which writes them.

A profile is data users share, so nothing here trusts it: a file that is not JSON, lacks a field, has the wrong
format or version, or whose checksum does not match its content (a damaged or hand-edited file) is a
`ProfileError` naming the file and what is wrong, never a fit silently taken as it reads.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from ..errors import UltraclusterError, shorten
from .factors import Calibration
from .fitted_files import fitted

FORMAT = "ultracluster-calibration-profile"
VERSION = 1
MAX_PROFILE_BYTES = 16 << 20      # a profile of a few hundred rows with their scenarios inlined is well below
# The factors a profile may set (ultracluster.calibrate fits these within these bounds, `calibrate.fit.CANDIDATES`;
# any other name is a damaged profile): name -> (lowest, highest, why). The shipped fit's search bounds
# (`calibrate.training.FIT`, `calibrate.shipped.TRN2_FIT`), a zero lower bound moved to a positive one for logs.
FACTOR_BOUNDS = {
    "tensor_efficiency": (0.2, 1.0, "the fraction of the chip's matmul peak a matmul sustains: at most all of it; "
                                    "from 0.2, the shipped fit's search range (calibrate.training.FIT)"),
    "in_graph_sync_s": (1e-6, 5e-3, "seconds per in-graph collective synchronisation: 1 us (a link's latency) to "
                                    "5 ms, the shipped fit's search range"),
    "in_graph_sync_scale_trn2": (1e-3, 3.0, "Trainium2's in-graph synchronisation over Trainium's (ratio): the "
                                            "shipped fit's search range"),
    "graph_s_nxd": (1e-5, 20e-3, "seconds per graph execution of NxD's pipeline engine: 10 us (a kernel launch) to "
                                 "20 ms (the shipped fit's search range)"),
    "graph_s_nemo": (1e-5, 20e-3, "seconds per graph execution of NeMo's pipeline engine: 10 us (a kernel launch) "
                                  "to 20 ms (the shipped fit's search range)"),
}
FACTORS = tuple(FACTOR_BOUNDS)
# the evidence's log errors (fit_log, release_sigma): at most a log error of 3 (a factor of 20 per sigma), beyond
# which the profile predicts nothing
MAX_LOG_ERROR = 3.0
ROUNDING = 1e-9                    # the relative slack of a bound (a factor fitted at its bound, through exp(log))


class ProfileError(UltraclusterError):
    """A calibration profile cannot be used: unreadable, not a profile, damaged or edited. Bad input (exit 2)."""


def _canonical(value: Any) -> Any:
    """The content as the checksum sees it: mappings without their null values (a resolved scenario written as
    YAML drops them: top-N.yaml), at any depth."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def checksum(doc: dict) -> str:
    """sha256 of the profile's content without its `checksum` field and its null values, as canonical JSON (sorted
    keys, no spaces)."""
    body = _canonical({k: v for k, v in doc.items() if k != "checksum"})
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def seal(doc: dict) -> dict:
    """The profile with its checksum set (the last field)."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return {**body, "checksum": checksum(body)}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def in_bounds(name: str, value: float) -> bool:
    """Whether a factor's value lies within its physical bounds (FACTOR_BOUNDS, with the slack of rounding)."""
    lo, hi, _ = FACTOR_BOUNDS[name]
    return lo * (1 - ROUNDING) <= value <= hi * (1 + ROUNDING)


def verify(doc: Any, source: str) -> dict:
    """The profile `doc` (read from `source`) if it is a whole, unedited profile of this format, else ProfileError."""
    def bad(what: str) -> ProfileError:
        return ProfileError(f"{source}: {what}")

    if not isinstance(doc, dict):
        raise bad(f"not a calibration profile (a JSON {type(doc).__name__}, not an object written by "
                  "`ultracluster calibrate`)")
    if doc.get("format") != FORMAT:
        raise bad(f"not a calibration profile (format {doc.get('format')!r}; allowed: {FORMAT!r}, written by "
                  "`ultracluster calibrate`)")
    if doc.get("version") != VERSION:
        raise bad(f"profile format version {doc.get('version')!r} is not one this ultracluster reads "
                  f"(allowed: {VERSION}); recalibrate with this version")
    try:
        expected = checksum(doc)
    except (TypeError, ValueError) as exc:
        raise bad(f"the profile is damaged ({exc})") from exc
    if doc.get("checksum") != expected:
        raise bad(f"the checksum does not match the content (given {str(doc.get('checksum'))[:80]!r}, content "
                  f"{expected[:19]}…): the file was damaged or edited after `ultracluster calibrate` wrote it; "
                  "recalibrate from the measurements instead of editing a profile")
    # the values are checked against their physical bounds even when the checksum matches: a checksum says the file
    # is whole, not that what it holds can be timed (a resealed tensor_efficiency of 1e-300 would give a 4e298 s step)
    factors = doc.get("factors")
    if not isinstance(factors, dict) or not factors or not set(factors) <= set(FACTORS) \
            or not all(_finite(v) and v > 0 for v in factors.values()):
        raise bad(f"factors: given {shorten(factors)}; allowed: positive numbers for {', '.join(FACTORS)}")
    for name, value in factors.items():
        if not in_bounds(name, value):
            lo, hi, why = FACTOR_BOUNDS[name]
            raise bad(f"factors.{name}: given {value!r}; allowed: {lo:g} to {hi:g} ({why})")
    ev = doc.get("evidence")
    if not isinstance(ev, dict) or not all(_finite(ev.get(k)) and 0 <= ev.get(k) <= MAX_LOG_ERROR
                                           for k in ("fit_log", "release_sigma")):
        raise bad(f"evidence: given {shorten(ev)}; allowed: fit_log and release_sigma, log errors from 0 to "
                  f"{MAX_LOG_ERROR:g} (a factor of {math.exp(MAX_LOG_ERROR):.0f} per sigma: beyond it the profile "
                  f"predicts nothing)")
    ranges = doc.get("ranges") or {}
    if not isinstance(ranges, dict):
        raise bad(f"ranges: given {shorten(ranges)}; allowed: each fitted factor's [low, high]")
    for name, span in ranges.items():
        if name in FACTOR_BOUNDS and isinstance(span, list) and len(span) == 2:
            if not all(_finite(v) and in_bounds(name, v) for v in span) or span[0] > span[1]:
                lo, hi, why = FACTOR_BOUNDS[name]
                raise bad(f"ranges.{name}: given {shorten(span)}; allowed: [low, high], low <= high, each from "
                          f"{lo:g} to {hi:g} ({why})")
    if not isinstance(doc.get("rows"), list) or not doc["rows"]:
        raise bad("rows: given none; allowed: the measured rows the profile was fitted to")
    return doc


def read_profile(path: str | Path) -> dict:
    """Read and verify a profile file (bounded: a regular file of at most 16 MiB)."""
    from ..yaml_input import InputError, load_json, read_bounded

    try:
        data = read_bounded(path, MAX_PROFILE_BYTES, "calibration profile (JSON)")
    except InputError as err:
        raise ProfileError(f"{err.given}: cannot be read; allowed: {err.allowed}") from err
    try:
        doc = load_json(data, str(path))
    except InputError as err:
        raise ProfileError(f"{path}: not a calibration profile ({err.allowed})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProfileError(f"{path}: not a calibration profile (not JSON: {exc})") from exc
    return verify(doc, str(path))


def calibration_of(doc: dict, base: Calibration | None = None) -> Calibration:
    """The shipped calibration (`base`) with the profile's factors."""
    return (base or fitted()).with_(**{k: float(v) for k, v in doc["factors"].items()})


def evidence_of(doc: dict) -> tuple[float, float, dict[str, tuple[float, float]]]:
    """(fit_log, release_sigma, ranges): what the profile measured about its own errors, for the 80 % interval;
    `ranges`: each fitted factor's identifiable range, which replaces its uncertain range."""
    ev = doc["evidence"]
    ranges = {k: (float(v[0]), float(v[1])) for k, v in (doc.get("ranges") or {}).items()
              if k in doc.get("fitted", []) and isinstance(v, list) and len(v) == 2}
    return float(ev["fit_log"]), float(ev["release_sigma"]), ranges


def scenario_profile(scenario) -> dict | None:
    """The verified profile a resolved scenario carries (`calibration.profile`, inlined when it was read), or None."""
    spec = getattr(scenario, "calibration", None)
    return None if spec is None else spec.document


def calibration_for(scenario, calibration: Calibration | None = None) -> Calibration:
    """The calibration a run of `scenario` uses: `calibration` when given, else the scenario's profile's, else the
    shipped fit."""
    if calibration is not None:
        return calibration
    doc = scenario_profile(scenario)
    return calibration_of(doc) if doc else fitted()
