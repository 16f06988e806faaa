"""A run directory read back: its JSON files and CSV tables, each bounded and validated against the columns and
dtypes the run writes, or a `RunDirError` naming every problem (`Report.from_run_dir` is the one caller; it
hands in the tables' schemas, so that this module needs nothing of the report's building)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ultracluster.errors import Problem, UltraclusterError, shorten, shorten_text
from ultracluster.units import MIB
from ultracluster.yaml_input import InputError, load_json, open_regular, read_bounded

JSON_MAX_BYTES = 64 * MIB        # summary.json, run.json, scenario.json as `Report.from_run_dir` reads them
CSV_MAX_BYTES = 1024 * MIB       # each table
HEADER_MAX_BYTES = 64 * 1024     # a CSV's first line
# Rows read at a time (each chunk typed before the next is read, so that memory follows the typed table, not the
# text: pandas' strings cost about 10 x the file), and the most rows of a table whose length the run does not fix
# (ranks, stages, ...): 8 million rows, more than the catalog's largest cluster has ranks (500,000 chips of 8 cores)
CHUNK_ROWS = 100_000
MAX_TABLE_ROWS = 1 << 23
# timeline.csv holds a few slices per microbatch pass (compute, the collectives beside it, sends: 5.5 a pass for
# smoke.yaml); its bound is this many per pass of the run (scenario.json: replayed steps x microbatches x pp x
# virtual stages)
SLICES_PER_PASS = 16
# the tables with one row per replayed step: their length is summary.json's steps_replayed
PER_STEP_TABLES = ("steps", "breakdown")


class RunDirError(UltraclusterError):
    """A run directory cannot be read back (missing or malformed files); lists every problem.

    Args:
        problems: path of the file, what was found, what is needed.
    """

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__(self.problems)

    def __reduce__(self):
        return (type(self), (self.problems,))

    def __str__(self) -> str:
        return "\n".join(map(str, self.problems))


def read_run_dir(run_dir: str | os.PathLike, schemas: dict[str, pd.DataFrame]) -> dict:
    """The files of a run directory as `Report`'s arguments (see `Report.from_run_dir`); `schemas`: each table's
    name → an empty frame with its columns and dtypes. Raises `RunDirError` listing every problem."""
    run = Path(run_dir)
    if not run.is_dir():
        raise RunDirError([Problem(str(run), "no such directory" if not run.exists() else "a file",
                                   "a run directory written by `ultracluster run`")])
    problems: list[Problem] = []

    def read_json(name: str, required: bool):
        path = run / name
        if not path.exists():
            if required:
                problems.append(Problem(str(path), "<missing>", "the summary.json that `ultracluster run` "
                                                                "writes last (is the run finished?)"))
            return None
        try:
            return load_json(read_bounded(path, JSON_MAX_BYTES, "JSON file"), str(path))
        except InputError as err:
            problems.append(_file_problem(path, err))
        except ValueError as err:
            problems.append(Problem(str(path), f"unreadable JSON ({shorten_text(str(err), 120)})",
                                    "the file as `ultracluster run` wrote it"))
        return None

    emulation = read_json("run.json", False)
    unfinished = isinstance(emulation, dict) and emulation.get("finished") is False
    if unfinished and not (run / "summary.json").exists():
        ended = (f"interrupted by {emulation.get('signal')}" if emulation.get("interrupted")
                 else f"failed ({shorten_text(str(emulation.get('error')), 160)})")
        problems.append(Problem(str(run / "summary.json"), "<missing>",
                                f"the summary.json of a finished run; this run {ended} after "
                                f"{emulation.get('steps_finished', '?')} step(s) (run.json); steps.csv "
                                f"keeps them"))
        raise RunDirError(problems)
    summary, scenario = read_json("summary.json", True), read_json("scenario.json", False)
    if summary is not None and not isinstance(summary, dict):
        problems.append(Problem(str(run / "summary.json"), type(summary).__name__, "a JSON object"))
    tables: dict[str, pd.DataFrame] = {}
    infeasible = isinstance(summary, dict) and summary.get("feasible") is False
    replayed = summary.get("steps_replayed") if isinstance(summary, dict) else None
    per_step = replayed if type(replayed) is int and 0 <= replayed <= MAX_TABLE_ROWS else None
    for name in schemas:
        path = run / f"{name}.csv"
        empty = schemas[name]
        if not path.exists() and not path.is_symlink():
            tables[name] = empty.copy()
            continue
        passes = _passes(scenario, per_step)
        if name in PER_STEP_TABLES and per_step is not None:
            most, why = per_step, f"one per replayed step (summary.json's steps_replayed: {per_step})"
        elif name == "timeline" and passes is not None:
            most = min(MAX_TABLE_ROWS, SLICES_PER_PASS * passes)
            why = (f"at most {most:,} rows: {SLICES_PER_PASS} slices for each of the run's {passes:,} microbatch "
                   f"passes (scenario.json)")
        else:
            most, why = MAX_TABLE_ROWS, f"at most {MAX_TABLE_ROWS:,} rows (a table read back whole)"
        try:
            tables[name] = read_table(path, empty, empty_numbers=infeasible and name in ("stages", "shards"),
                                      max_rows=most, rows_allowed=why)
        except InputError as err:
            problems.append(_file_problem(path, err))
    if problems:
        raise RunDirError(problems)
    emulation = emulation if isinstance(emulation, dict) else {}
    return dict(steps=tables["steps"], breakdown=tables["breakdown"], memory=tables["memory"],
                collectives=tables["collectives"], timeline=tables["timeline"], summary=summary,
                scenario=scenario if isinstance(scenario, dict) else {},
                shard_instances=[tuple(s) for s in emulation.get("shard_instances", [])], emulation=emulation,
                ranks=tables["ranks"], stages=tables["stages"], shards=tables["shards"])


def _passes(scenario, steps: int | None) -> int | None:
    """The microbatch passes a run replayed (steps x microbatches per replica x pp x virtual stages), from its
    scenario.json and summary.json; None where they do not say."""
    if not isinstance(scenario, dict) or steps is None:
        return None
    t, par = scenario.get("training"), scenario.get("parallelism")
    if not isinstance(t, dict) or not isinstance(par, dict):
        return None
    gb, mb, dp, pp, v = t.get("global_batch"), t.get("micro_batch"), par.get("dp"), par.get("pp"), \
        par.get("virtual_stages", 1)
    if not all(type(x) is int and 1 <= x <= 1 << 40 for x in (gb, mb, dp, pp, v)):
        return None
    return max(1, steps) * max(1, gb // (dp * mb)) * pp * v


def _file_problem(path: Path, err: InputError) -> Problem:
    """A run directory's file that could not be read (why, and what is allowed) or that is malformed (where)."""
    if err.reason:
        return Problem(str(path), err.reason, err.allowed.removesuffix(f" ({err.reason})"))
    return Problem(str(path), err.given, err.allowed)


def read_table(path: Path, schema: pd.DataFrame, empty_numbers: bool = False, max_rows: int = MAX_TABLE_ROWS,
               rows_allowed: str = "") -> pd.DataFrame:
    """One CSV table of a run directory, validated against the columns and dtypes the run writes.

    Args:
        path: the CSV file.
        schema: an empty frame with the table's columns and dtypes (`_blank()`).
        empty_numbers: whether a float cell may be empty (a statistic an infeasible run could not measure).
        max_rows: the most rows (past the header) allowed; the file is read CHUNK_ROWS at a time and refused at the
            first chunk beyond it, so that neither memory nor time follows a file's size.
        rows_allowed: why (the InputError's `allowed`).

    Returns:
        The table with the schema's columns (in its order) and dtypes; an empty file or a header alone
        gives the empty schema.

    Raises:
        InputError: not a regular file or over 1 GiB; a first line that is not the run's header; a row
            without every column; a value that does not parse as its column's type, or a number that is not
            finite: `given` names the line and column.
    """
    columns = list(schema.columns)
    with open_regular(path, CSV_MAX_BYTES, "CSV file") as f:
        first = f.readline(HEADER_MAX_BYTES + 1)
        if not first:
            return schema.copy()
        if len(first) > HEADER_MAX_BYTES:
            raise InputError(f"a first line of more than {HEADER_MAX_BYTES // 1024} KiB", f"the header line the "
                             f"run writes: {', '.join(columns)}", in_document=True)
        f.seek(0)
        parts: list[pd.DataFrame] = []
        rows_seen = 0
        try:
            chunks = pd.read_csv(f, header=None, dtype=str, keep_default_na=False, encoding="utf-8",
                                 chunksize=CHUNK_ROWS)
            for k, chunk in enumerate(chunks):
                if k == 0:
                    header, chunk = _header(chunk, columns), chunk.iloc[1:]
                parts.append(_typed(chunk, schema, empty_numbers, rows_seen))   # a bad value first: its line
                rows_seen += len(chunk)
                if rows_seen > max_rows:
                    raise InputError(f"more than {max_rows:,} rows", rows_allowed or f"at most {max_rows:,} rows",
                                     in_document=True)
        except (ValueError, UnicodeDecodeError) as err:   # pandas' ParserError is a ValueError
            raise InputError(f"unreadable CSV ({shorten_text(str(err), 160)})", "the file as `ultracluster run` "
                             "wrote it", in_document=True) from None
    if not rows_seen:
        return schema.copy()
    return pd.concat(parts, ignore_index=True).astype(schema.dtypes.to_dict())


def _header(raw: pd.DataFrame, columns: list[str]) -> list[str]:
    """The first row of a table, which must be the run's header (InputError naming what differs)."""
    header = raw.iloc[0].tolist()
    if header != columns:
        missing = [c for c in columns if c not in header]
        unexpected = [c for c in header if c not in columns]
        detail = "; ".join(x for x in (f"missing {shorten(missing)}" if missing else "",
                                       f"unexpected {shorten(unexpected)}" if unexpected else "",
                                       "" if missing or unexpected else "columns out of order or repeated") if x)
        raise InputError(f"a header with {detail}", f"the columns the run writes, in order: {', '.join(columns)}",
                         in_document=True)
    return header


def _typed(raw: pd.DataFrame, schema: pd.DataFrame, empty_numbers: bool, first_row: int) -> pd.DataFrame:
    """One chunk of a table's rows (`first_row` rows past the header before it) with the schema's types, or an
    InputError naming the line and column of the first value that does not parse."""
    columns = list(schema.columns)
    rows = raw.reset_index(drop=True)     # a short row reads as empty cells: refused below
    rows.columns = columns
    out = {}
    for col in columns:
        text, kind = rows[col], schema[col].dtype
        if kind == bool:
            ok, values, want = text.isin(["True", "False"]).to_numpy(), (text == "True").to_numpy(), "True or False"
        elif pd.api.types.is_integer_dtype(kind):
            ok = text.str.fullmatch(r"[-+]?[0-9]{1,18}").to_numpy(dtype=bool)
            values, want = np.where(ok, text.where(ok, "0"), "0").astype(np.int64), "an integer"
        elif pd.api.types.is_float_dtype(kind):
            values = pd.to_numeric(text.where(text != "", "nan"), errors="coerce").to_numpy(dtype=np.float64)
            ok = np.isfinite(values) | ((text == "").to_numpy() & empty_numbers)
            want = "a finite number" + (" or an empty cell" if empty_numbers else "")
        else:
            ok, values, want = np.ones(len(text), dtype=bool), text.to_numpy(dtype=object), "text"
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise InputError(f"line {first_row + i + 2}, column {col}: {shorten(text.iloc[i])}", want,
                             in_document=True)
        out[col] = values
    return pd.DataFrame(out, columns=columns)
