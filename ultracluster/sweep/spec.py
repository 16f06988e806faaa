"""`--vary KEY=V1,V2,...` flags or a scenario's `sweep:` section → the variants of a sweep, every one validated
before any is priced.

A variant is the scenario with one value of each varied key set (as `--set` sets it): the grid of every
combination of the lists, or, with `zip`, the lists paired. Every variant is loaded and validated up front; the
problems of all of them are reported together (each once, with how many variants share it and the first of them),
and nothing runs. Pure: no Ray, no files but the scenario's own.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import Problem, ScenarioError
from ..report.progress import duration
from ..goodput import check_hours
from ..job import Job
from ..scenario import Scenario, load_scenario
from ..yaml_input import InputError, load_yaml, read_yaml_file
from .assumptions import conservative_sets
from ..step.price import FLAG_PRICE

MAX_VARIANTS = 500       # default --max-variants: a larger grid is refused before anything runs (raise the flag)
# What one variant costs before anything runs (measured: smoke.yaml variants, 2.4 ms and 7.3 KiB each, validated
# and held, on one core of a 2-vCPU VM) and while it runs (a variant's evaluation, 0.2 s for smoke.yaml to seconds
# for a large model: sweeps.md); a sweep holds every validated variant, so the most any --max-variants allows is
# bounded by memory and time: 50,000 variants are about 2 minutes of validation and 360 MiB, and hours of
# evaluation on one CPU
VALIDATE_S = 2.4e-3
VARIANT_BYTES = 7.3 * 1024
MAX_SWEEP_VARIANTS = 50_000
NOT_VARIED = ("name", "sweep")   # keys a variant cannot set: its name is the sweep's, and a variant is no sweep
# keys whose change moves the rank count or the model-parallel degrees: a file's fixed parallelism.dp is dropped
# (derived per variant) unless dp itself is varied
RANK_KEYS = ("cluster.instances", "cluster.instance", "cluster.lnc", "parallelism.tp", "parallelism.pp",
             "parallelism.cp")
# keys whose value follows from the instance type: a file's value is its own type's, so a variant of another type
# leaves them to that type (its UltraServer default, its price: `--price-per-hour`, else the catalog's) unless the
# sweep sets them itself (--set, --vary)
TYPE_KEYS = ("ultraserver", "price_per_hour_usd")


@dataclass(frozen=True)
class Variant:
    """One variant: its position in the sweep, the value of each varied key, and its validated scenario."""

    index: int
    values: dict[str, Any]
    scenario: Scenario
    key: str                  # the variant's identity in a sweep directory (its values and the sweep's options)
    price_source: str | None = None   # where its instance price comes from, when the sweep set it (`build`)

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={_text(v)}" for k, v in self.values.items())


@dataclass
class SweepPlan:
    """What a sweep prices: the base scenario, the varied keys, the variants and notes for the user."""

    base: Scenario
    keys: list[str]
    zipped: bool
    hours: float | None
    variants: list[Variant]
    notes: list[str] = field(default_factory=list)


def _text(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (dict, list)) else str(v).lower() if isinstance(v, bool) else str(v)


def parse_vary(items: list[str]) -> tuple[dict[str, list[Any]], list[Problem]]:
    """`--vary KEY=V1,V2,...` flags → {key: values} (each value read as YAML, as `--set` reads it), with the
    malformed ones as problems naming the flag."""
    out: dict[str, list[Any]] = {}
    problems = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        parts = key.split(".")
        if not sep or not all(p.strip() for p in parts) or not text.strip():
            problems.append(Problem("--vary", item, "KEY=V1,V2,... with a scenario key and one or more values, "
                                                    "e.g. storage.capacity_tib=4.8,48"))
            continue
        if key in out:
            problems.append(Problem("--vary", item, f"each key once (--vary {key}= is given twice)"))
            continue
        values = []
        for raw in text.split(","):
            try:
                values.append(load_yaml(raw.strip()))
            except InputError:
                problems.append(Problem(f"--vary {key}", raw, "a YAML value: a number, true/false or a string"))
        out[key] = values
    return out, problems


def check_vary(vary: dict[str, list[Any]], zipped: bool, where: str, max_variants: int) -> list[Problem]:
    """The varied keys and lists themselves: allowed keys, non-empty lists without repeats, equal lengths with
    zip, and the variant count within `max_variants`."""
    problems = []
    if not vary:
        problems.append(Problem(where, "<missing>", "at least one --vary KEY=V1,V2,... (or a scenario's sweep.vary)"))
    for key, values in vary.items():
        if key.split(".")[0] in NOT_VARIED:
            problems.append(Problem(f"{where} {key}", values, "a scenario key other than name and sweep"))
        if not isinstance(values, list) or not values:
            problems.append(Problem(f"{where} {key}", values, "a non-empty list of values"))
            continue
        seen = [json.dumps(v, sort_keys=True, default=str) for v in values]
        if len(set(seen)) < len(seen):
            problems.append(Problem(f"{where} {key}", values, "each value once"))
    lengths = {k: len(v) for k, v in vary.items() if isinstance(v, list)}
    if zipped and len(set(lengths.values())) > 1:
        problems.append(Problem("--zip", ", ".join(f"{k}: {n}" for k, n in lengths.items()),
                                "lists of one length (zip pairs the i-th values), or no --zip for their grid"))
    count = variant_count(vary, zipped)
    if count > MAX_SWEEP_VARIANTS:       # whatever --max-variants says: counted, never built
        shape = " x ".join(f"{n:,}" for n in lengths.values())
        problems.append(Problem("--max-variants" if max_variants > MAX_SWEEP_VARIANTS else where,
                                f"{count:,} variants ({shape})", (
            f"at most {MAX_SWEEP_VARIANTS:,} variants in one sweep, whatever --max-variants says: every variant "
            f"is validated and held before any runs (about {duration(VALIDATE_S * count)} and "
            f"{VARIANT_BYTES * count / 2**30:,.1f} GiB for this one), then timed for 0.2 s to seconds each; vary "
            f"fewer values, or split the sweep")))
    elif count > max_variants:
        shape = " x ".join(str(n) for n in lengths.values())
        problems.append(Problem("--max-variants", f"{count:,} variants ({shape})",
                                f"at most {max_variants:,} variants: raise --max-variants, or vary fewer values"))
    return problems


def variant_count(vary: dict[str, list[Any]], zipped: bool) -> int:
    """How many variants the lists give (their product, or with zip the longest), counted, never built."""
    lengths = [len(v) for v in vary.values() if isinstance(v, list)]
    if not lengths:
        return 0
    return max(lengths) if zipped else math.prod(lengths)


def combinations(vary: dict[str, list[Any]], zipped: bool) -> Iterator[dict[str, Any]]:
    """Every variant's values, in order, one at a time (a stream: never the whole grid in memory): the grid (the
    last key varying fastest), or the lists paired."""
    keys = list(vary)
    rows = zip(*vary.values()) if zipped else itertools.product(*vary.values())
    return (dict(zip(keys, r)) for r in rows)


def _absolute_paths(raw: dict, where: Path) -> dict:
    """The scenario's relative file paths (operator libraries, a calibration profile) made absolute, so that its
    dict loads like its file."""
    raw = copy.deepcopy(raw)
    base = where.parent
    if isinstance(raw.get("operators"), list):
        raw["operators"] = [str((base / e).absolute()) if isinstance(e, str) and not Path(e).is_absolute() else e
                            for e in raw["operators"]]
    cal = raw.get("calibration")
    if isinstance(cal, dict) and isinstance(cal.get("profile"), str) and not Path(cal["profile"]).is_absolute():
        raw["calibration"] = {**cal, "profile": str((base / cal["profile"]).absolute())}
    return raw


def variant_key(values: dict[str, Any], options: dict) -> str:
    """A variant's identity in a sweep directory: its values and every option that changes its row."""
    text = json.dumps({"values": values, "options": options}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(path: str | Path, overrides: list[str], vary_flags: list[str], zipped: bool | None, hours: float | None,
          max_variants: int = MAX_VARIANTS, options: dict | None = None, prices: dict[str, float] | None = None,
          conservative: bool = False, log: Callable[[str], None] | None = None) -> SweepPlan:
    """Read the scenario, take its sweep (the flags over its `sweep:` section), validate every variant.

    Args:
        path: the scenario file.
        overrides: `--set` values, applied to every variant before its own values.
        vary_flags: `--vary` values (none: the scenario's `sweep.vary`).
        zipped: `--zip` (None: the scenario's `sweep.zip`).
        hours: `--hours` (None: the scenario's `sweep.hours`).
        max_variants: the most variants allowed.
        options: what else changes a variant's row (its identity in a sweep directory).
        prices: USD per instance-hour by instance type (`--price-per-hour TYPE=USD`), for the variants whose type
            is listed and whose scenario sets no price.
        conservative: every assumption with an argued range at its conservative end (`--assumptions off`,
            `assumptions.conservative_sets`).
        log: told how long validating the variants will take, when it is more than a few seconds.

    Raises:
        ScenarioError: every problem of the flags, the scenario and every variant, each once.
    """
    base = load_scenario(path, overrides)       # the scenario itself must load: its problems come first
    problems: list[Problem] = []
    notes: list[str] = []
    if vary_flags:
        vary, problems = parse_vary(vary_flags)
        where = "--vary"
        if base.sweep is not None:
            notes.append("--vary replaces the scenario's sweep.vary")
    elif base.sweep is not None:
        vary, where = dict(base.sweep.vary), "sweep.vary"
    else:
        vary, where = {}, "--vary"
    zipped = bool(base.sweep.zip if zipped is None and base.sweep is not None else zipped)
    if hours is None and base.sweep is not None:
        hours = base.sweep.hours
    if hours is not None:            # as `run --hours` checks it, before anything runs (each variant's failures below)
        problems += [p for p in check_hours(base, hours) if p.path == "--hours"]
    problems += check_vary(vary, zipped, where, max_variants)
    if problems:
        raise ScenarioError(problems)
    try:
        raw = read_yaml_file(path)
    except InputError as err:           # read above; only a file changed in between gets here
        raise ScenarioError([Problem("(file)", err.given, err.allowed)], str(path)) from None
    raw = _absolute_paths(raw, Path(path))
    raw.pop("sweep", None)
    fixed_dp = isinstance(raw.get("parallelism"), dict) and "dp" in raw["parallelism"] and \
        "parallelism.dp" not in vary and not any(o.startswith("parallelism.dp=") for o in overrides)
    if fixed_dp and any(k in vary for k in RANK_KEYS):
        raw["parallelism"] = {k: v for k, v in raw["parallelism"].items() if k != "dp"}
        notes.append(f"parallelism.dp (the file's {raw_dp(path)}) is derived per variant: the sweep varies "
                     f"{', '.join(k for k in vary if k in RANK_KEYS)}; vary parallelism.dp to set it")
    total = variant_count(vary, zipped)
    if log is not None and VALIDATE_S * total > 5:
        log(f"sweep: validating {total:,} variants (about {duration(VALIDATE_S * total)}) before any runs")
    options = dict(options or {}, hours=hours, overrides=list(overrides), prices=prices or {},
                   conservative=conservative)
    variants: list[Variant] = []
    seen: dict[tuple, list] = {}
    cluster = raw.get("cluster") if isinstance(raw.get("cluster"), dict) else {}
    given = set(vary) | {o.partition("=")[0].strip() for o in overrides}
    own_type = [k for k in TYPE_KEYS if k in cluster and f"cluster.{k}" not in given]
    other_type = raw
    if own_type:
        other_type = copy.deepcopy(raw)
        for k in own_type:
            other_type["cluster"].pop(k)
    left: set[str] = set()
    for i, values in enumerate(combinations(vary, zipped)):
        sets = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in values.items()]
        name = f"{base.name}-v{i + 1:0{len(str(total))}d}"[:200]
        try:
            src = raw
            sc = Job.of(src, [*overrides, *sets, f"name={name}"]).scenario
            if own_type and sc.cluster.instance != cluster.get("instance"):    # another type: its own defaults
                src = other_type
                left.add(sc.cluster.instance)
                sc = Job.of(src, [*overrides, *sets, f"name={name}"]).scenario
            more = conservative_sets(sc) if conservative else []
            price_from = None
            if prices and sc.cluster.instance in prices and "cluster.price_per_hour_usd" not in given:
                more.append(f"cluster.price_per_hour_usd={prices[sc.cluster.instance]!r}")   # the flag wins
                price_from = FLAG_PRICE
            if more:
                sc = Job.of(src, [*overrides, *sets, *more, f"name={name}"]).scenario
            if hours is not None and (late := check_hours(sc, hours)):
                raise ScenarioError(late)
        except ScenarioError as err:
            for p in err.problems:
                seen.setdefault((p.path, repr(p.given), p.allowed), [p, 0, values])[1] += 1
            continue
        variants.append(Variant(i, values, sc, variant_key(values, options), price_from))
    if seen:
        out = []
        for p, n, values in seen.values():
            first = ", ".join(f"{k}={_text(v)}" for k, v in values.items())
            out.append(Problem(p.path, p.given, f"{p.allowed} (in {n} of {total} variant{'s' * (total != 1)}, "
                                                f"the first: {first})"))
        raise ScenarioError(out, str(path))
    if left:
        keys = " and ".join(f"cluster.{k}" for k in own_type)
        notes.append(f"{keys}: the file's, for {cluster.get('instance')}; the variants of "
                     f"{', '.join(sorted(left))} take their own type's ({FLAG_PRICE} or the catalog for the price); "
                     f"--set or --vary {keys.split(' and ')[0]} to fix it for every variant")
    return SweepPlan(base=base, keys=list(vary), zipped=zipped, hours=hours, variants=variants, notes=notes)


def raw_dp(path: str | Path) -> Any:
    try:
        return (read_yaml_file(path).get("parallelism") or {}).get("dp")
    except (InputError, AttributeError):
        return "?"
