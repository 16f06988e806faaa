"""A measurements file → validated rows: one measured run per row, its scenario loaded as `run` loads it.

The file is CSV (a header line, then one row per run) or YAML (a list of mappings, or a mapping whose `rows` is
one). Columns / keys:

- `scenario`: the scenario YAML the run used, relative to the measurements file;
- exactly one of `step_time_s`, `seq_per_s`, `tokens_per_s`: what was measured (a number > 0);
- `note` (optional): free text, e.g. the software stack and release; the profile lists the distinct notes as
  the software the rows came from;
- `pair` (optional): a label shared by exactly two rows of two scenarios measured side by side on the same
  software (a 1-instance and a 16-instance run, say): only the ratio of their per-instance throughputs is fitted,
  so a release difference between them and the other rows does not move the fit.

Every problem of every row is collected (`row N: field: given X; allowed: Y`) and raised together as one
ScenarioError, before anything is fitted or written.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, ScenarioError, kind_of, shorten
from ..scenario import Scenario, load_scenario
from ..yaml_input import InputError, load_yaml, read_bounded

QUANTITIES = ("step_time_s", "seq_per_s", "tokens_per_s")
COLUMNS = ("scenario", *QUANTITIES, "note", "pair")
MAX_ROWS = 1000
HEADER_CELL_CHARS = 40       # of a header cell a message repeats


@dataclass(frozen=True)
class Row:
    """One measured run.

    Attributes:
        number: 1-based row number in the file (CSV: data rows after the header).
        where: how messages name it (`row 3`, or `row 3 (line 4)` in a CSV).
        scenario_path: the `scenario` value as written; `path` resolved.
        scenario: the validated scenario (its `calibration` key dropped: the fit sets the factors).
        measured: which quantity was given (`step_time_s`, `seq_per_s` or `tokens_per_s`) and `value` its value.
        step_time_s: the measured step time it implies (global_batch / seq_per_s, tokens_per_step / tokens_per_s).
        note, pair: the optional columns ("" when absent).
    """

    number: int
    where: str
    scenario_path: str
    path: Path
    scenario: Scenario
    measured: str
    value: float
    step_time_s: float
    note: str = ""
    pair: str = ""

    @property
    def throughput(self) -> float:
        """Steps per second measured (1 / step time): the fit's medians are taken over it."""
        return 1.0 / self.step_time_s

    @property
    def instances(self) -> int:
        return self.scenario.cluster.instances


def _number(text: object) -> float | None:
    if isinstance(text, bool):
        return None
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _records(path: Path) -> list[tuple[str, dict]]:
    """(where, fields) of each row of the file; ScenarioError when the file itself cannot be read."""
    try:
        text = read_bounded(path, what="measurements file (CSV or YAML)").decode("utf-8-sig")   # Excel's BOM
    except InputError as err:
        raise ScenarioError([Problem("(file)", err.given, err.allowed)], str(path)) from None
    except UnicodeDecodeError:
        raise ScenarioError([Problem("(file)", str(path), "a UTF-8 text file")], str(path)) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            doc = load_yaml(text)
        except InputError as err:
            raise ScenarioError([Problem("(file)", err.given, err.allowed)], str(path)) from None
        if isinstance(doc, dict) and set(doc) == {"rows"}:
            doc = doc["rows"]
        if not isinstance(doc, list):
            raise ScenarioError([Problem("(file)", kind_of(doc), "a list of measured runs (mappings with scenario and "
                                                        "one of step_time_s, seq_per_s, tokens_per_s), or a "
                                                        "mapping whose `rows` is that list")], str(path))
        return [(f"row {i}", r) for i, r in enumerate(doc, 1)]
    reader = csv.reader(io.StringIO(text))
    lines = [(reader.line_num, r) for r in reader if any(c.strip() for c in r)]
    if not lines:
        raise ScenarioError([Problem("(file)", "an empty file", "a CSV header (scenario, step_time_s | seq_per_s | "
                                                              "tokens_per_s, note, pair) and one row per run")],
                            str(path))
    header = [h.strip() for h in lines[0][1]]
    unknown = [h for h in header if h not in COLUMNS]
    missing = [] if "scenario" in header else ["scenario"]
    dupes = sorted({h for h in header if header.count(h) > 1})
    if unknown or missing or dupes:
        # the offending columns only, each cut: a file that is no measurements file (/etc/passwd) is not echoed
        named = [f"unknown {', '.join(shorten(h, HEADER_CELL_CHARS) for h in unknown[:3])}"
                 + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")] if unknown else []
        named += ["no scenario column"] if missing else []
        named += [f"repeated {', '.join(shorten(h, HEADER_CELL_CHARS) for h in dupes[:3])}"] if dupes else []
        given = f"a header of {len(header)} column{'s' * (len(header) != 1)}: " + "; ".join(named)
        raise ScenarioError([Problem("(header)", given, f"the columns {', '.join(COLUMNS)} (scenario and one of "
                                                        f"the measured quantities required; each once)")], str(path))
    out = []
    for i, (line, cells) in enumerate(lines[1:], 1):
        rec = {h: c.strip() for h, c in zip(header, cells) if c.strip() != ""}
        if len(cells) > len(header):
            rec["(extra cells)"] = cells[len(header):]
        out.append((f"row {i} (line {line})", rec))
    return out


def read_measurements(path: str | Path) -> list[Row]:
    """The measured rows of a CSV or YAML file, every scenario validated; ScenarioError with every problem."""
    path = Path(path)
    records = _records(path)
    problems: list[Problem] = []
    if not records:
        problems.append(Problem("rows", "none", "at least one measured run"))
    if len(records) > MAX_ROWS:
        problems.append(Problem("rows", f"{len(records)} rows", f"at most {MAX_ROWS} measured runs"))
    rows: list[Row] = []
    cache: dict[Path, Scenario | ScenarioError] = {}
    for number, (where, rec) in enumerate(records[:MAX_ROWS], 1):
        if not isinstance(rec, dict):
            problems.append(Problem(where, rec, "a mapping with scenario and one of " + ", ".join(QUANTITIES)))
            continue
        bad = [k for k in rec if k not in COLUMNS]
        for k in bad:
            problems.append(Problem(f"{where}: {k}", rec[k], "no such field; allowed: " + ", ".join(COLUMNS)))
        given = [q for q in QUANTITIES if rec.get(q) not in (None, "")]
        if len(given) != 1:
            problems.append(Problem(f"{where}: {' / '.join(QUANTITIES)}", ", ".join(given) or "<missing>",
                                    "exactly one measured quantity per row"))
        value = _number(rec[given[0]]) if len(given) == 1 else None
        if len(given) == 1 and value is None:
            problems.append(Problem(f"{where}: {given[0]}", rec[given[0]], "a finite number > 0"))
        note, pair = rec.get("note", ""), rec.get("pair", "")
        for key, v in (("note", note), ("pair", pair)):
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                problems.append(Problem(f"{where}: {key}", v, "a text"))
        entry = rec.get("scenario")
        if not isinstance(entry, str) or not entry.strip():
            problems.append(Problem(f"{where}: scenario", entry if entry is not None else "<missing>",
                                    "the path of the run's scenario YAML, relative to the measurements file"))
            continue
        sc_path = (path.parent / entry).resolve() if not Path(entry).is_absolute() else Path(entry)
        if sc_path not in cache:
            try:
                cache[sc_path] = _fit_scenario(load_scenario(sc_path))
            except ScenarioError as err:
                cache[sc_path] = err
        sc = cache[sc_path]
        if isinstance(sc, ScenarioError):
            problems += [Problem(f"{where}: scenario {entry}: {p.path}", p.given, p.allowed) for p in sc.problems]
            continue
        if value is None or bad or len(given) != 1:
            continue
        step = {"step_time_s": value, "seq_per_s": sc.training.global_batch / value,
                "tokens_per_s": sc.tokens_per_step / value}[given[0]]
        rows.append(Row(number, where, entry, sc_path, sc, given[0], value, step, str(note), str(pair)))
    problems += _pair_problems(rows)
    problems += _duplicate_problems(rows)
    if problems:
        raise ScenarioError(problems, str(path))
    return rows


def _fit_scenario(sc: Scenario) -> Scenario:
    """The scenario as the fit prices it: without a calibration profile of its own (the fit sets the factors)."""
    return sc.model_copy(update={"calibration": None}) if getattr(sc, "calibration", None) is not None else sc


def _duplicate_problems(rows: list[Row]) -> list[Problem]:
    """A row that repeats another exactly (the same scenario file, quantity, value, note and pair) is a copy, not a
    second measurement: counted twice it narrows the interval (twenty copies took it from 9.2 % to 4.9 %).
    Refused, naming both rows; repeated measurements of one run differ in their value."""
    first: dict[tuple, Row] = {}
    out = []
    for r in rows:
        key = (r.path, r.measured, r.value, r.note, r.pair)
        if key in first:
            out.append(Problem(f"{r.where}", f"the same row as {first[key].where} ({r.scenario_path}, "
                                             f"{r.measured} {r.value:g})",
                               "each measured run once: a copied row counts one measurement twice and narrows the "
                               "80 % interval; remove it (a repeated run gives its own measured value)"))
        else:
            first[key] = r
    return out


def _pair_problems(rows: list[Row]) -> list[Problem]:
    labels: dict[str, list[Row]] = {}
    for r in rows:
        if r.pair:
            labels.setdefault(r.pair, []).append(r)
    out = []
    for label, rs in labels.items():
        if len(rs) != 2 or rs[0].path == rs[1].path:
            out.append(Problem(f"{rs[0].where}: pair", label, "a label shared by exactly two rows of two different "
                                                               f"scenarios (given {len(rs)} row(s): "
                                                               f"{', '.join(r.where for r in rs)})"))
    return out
