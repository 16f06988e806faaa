"""The sweep's terminal table (`sweep.output.format_sweep`) on rows made here, no Ray: it fits 100 columns, names
every column it drops for width by its sweep.csv name, and prints a warning footnote only where a shown row's
mark points to it."""
from __future__ import annotations

import re

from ultracluster.sweep.evaluate import FIGURES, WARNING_JOIN
from ultracluster.sweep.output import CSV_NAMES, format_sweep, table

KEYS = ["storage.capacity_tib", "checkpoint.mode"]


def _rows(n: int, warnings: list[list[str]], budget: bool = True, keys=KEYS, values=None) -> list[dict]:
    rows = []
    for i in range(n):
        r = {f: None for f in FIGURES}
        r.update(status="ok", feasible=True, reason="", step_time_s=9.26 + i, step_time_low_s=7.86 + i,
                 step_time_high_s=10.7 + i, tokens_per_s=453043.0 - i, mfu=0.298, goodput=0.75 + 0.05 * i,
                 wall_step_time_s=12.4, wall_tokens_per_s=339527.0,
                 time_to_train_days=34.1 + i if budget else float("nan"),
                 time_to_train_low_days=28.9 + i if budget else float("nan"),
                 time_to_train_high_days=39.3 + i if budget else float("nan"),
                 total_cost_usd=2095575.0 + i if budget else float("nan"),
                 warnings=WARNING_JOIN.join(warnings[i]), variant=i + 1, key=f"k{i}")
        for k, v in zip(keys, (values or [(4.8, "sync")] * n)[i]):
            r[k] = v
        rows.append(r)
    return rows


def _footnotes(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"^\[(\d+)\] ", text, re.M)]


def _marks(text: str) -> set[int]:
    """Every footnote number a row of the table points to ("1-3,5" -> 1, 2, 3, 5)."""
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("#  "))
    if not lines[head].rstrip().endswith("warn"):
        return set()
    out = set()
    for ln in lines[head + 1:]:
        if not re.match(r"^\s*\d+\s", ln):
            break
        for part in ln.split()[-1].split(","):
            a, _, b = part.partition("-")
            out |= set(range(int(a), int(b or a) + 1))
    return out


LONG = [f"warning number {j}: " + "words " * 30 for j in range(21)]


def test_every_footnote_is_pointed_to_and_the_table_fits():
    warnings = [LONG[0:6], LONG[1:8], LONG[1:5] + [LONG[8]], LONG[1:5] + [LONG[9]]]
    frame = table(_rows(4, warnings), KEYS)
    text = format_sweep(frame, {"scenario": "s", "variants": 4, "hours": 720}, KEYS)
    assert max(map(len, text.splitlines())) <= 100
    assert set(_footnotes(text)) == _marks(text) == set(range(1, 11))     # 10 distinct warnings, each pointed to
    assert re.search(r"^ *1 .* 1-6$", text, re.M)                          # runs of marks: "1-6", not "1,2,3,4,5,6"
    dropped = re.search(r"^not shown for width: (.*); all in sweep.csv$", text, re.M)
    shown_head = next(ln for ln in text.splitlines() if ln.startswith("#  "))
    assert dropped, text
    names = dropped.group(1).split(", ")
    assert set(names) <= set(CSV_NAMES.values())
    for head, csv in CSV_NAMES.items():    # a column is either shown or named as not shown, never both or neither
        assert (csv in names) != (f" {head}" in shown_head or shown_head.startswith(head)), (head, text)
    # the decision's columns and the warnings' marks go last
    assert {"step_time_s", "goodput", "time_to_train_days", "total_cost_usd", "warnings"}.isdisjoint(names)


def test_without_room_for_the_marks_no_footnote_is_printed_but_the_warnings_are_counted():
    keys = [f"section{j}.a_rather_long_key_{j}" for j in range(5)]
    values = [tuple(f"value-{j}-{i}-long" for j in range(5)) for i in range(3)]
    frame = table(_rows(3, [LONG[:7], LONG[7:14], LONG[14:21]], keys=keys, values=values), keys)
    text = format_sweep(frame, {"scenario": "s", "variants": 3}, keys)
    assert max(map(len, text.splitlines())) <= 100
    assert _footnotes(text) == [] and _marks(text) == set()
    joined = text.replace("\n    ", " ")                                    # the notes' wrapped lines
    assert "warnings" in re.search(r"^not shown for width: (.*); all in sweep.csv$", joined, re.M).group(1)
    assert "21 distinct warnings on 3 of 3 variants, in sweep.csv's warnings column" in joined


def test_nothing_dropped_says_nothing_and_no_warnings_no_column():
    frame = table(_rows(2, [[], []], budget=False), KEYS)
    text = format_sweep(frame, {"scenario": "s", "variants": 2}, KEYS)
    assert "not shown for width" not in text and "warn" not in text.splitlines()[1]
    assert "days and dollars: set training.budget_tokens" in text
    assert re.search(r"step s \(80 %\)\s+goodput\s+tokens/s\s+MFU$", text.splitlines()[1])
