"""Hostile input to the loader: alias bombs, deep nesting, huge values, FIFOs, devices, files over the cap, and
arbitrary YAML documents (hypothesis). Each is refused with exit 2 and a short message, or loads; never a hang,
a traceback or megabytes of output."""
from __future__ import annotations

import contextlib
import datetime
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ultracluster.cli import main
from ultracluster.errors import EXIT_BAD_INPUT, EXIT_OK, GIVEN_MAX_CHARS, Problem, shorten
from ultracluster.scenario import load_scenario
from ultracluster.yaml_input import MAX_DEPTH, MAX_INPUT_BYTES, MAX_VALUES, InputError, load_yaml

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scenarios" / "smoke.yaml"
OUTPUT_MAX_BYTES = 64 * 1024


def alias_bomb(levels: int = 8, fan_out: int = 9) -> str:
    """`levels` lines, each anchor a list repeating the previous one `fan_out` times: fan_out**levels values."""
    lines = [f'a0: &a0 [{", ".join(["lol"] * fan_out)}]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan_out)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def cli(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ultracluster", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
    return done, time.monotonic() - start


def validate_in_process(*args: str) -> tuple[int, str]:
    """`ultracluster validate ...` in this process: exit code and everything it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["validate", *args])
        except SystemExit as stop:      # argparse
            rc = stop.code
    return rc, out.getvalue() + err.getvalue()


def test_the_eight_line_alias_bomb_is_refused_fast_and_briefly(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert len(bomb.read_text().splitlines()) == 8          # 9**8 = 43 million values once expanded
    done, seconds = cli("validate", str(bomb))
    assert done.returncode == EXIT_BAD_INPUT
    assert seconds < 10 and len(done.stdout) + len(done.stderr) < OUTPUT_MAX_BYTES
    assert "Traceback" not in done.stderr
    assert str(bomb) in done.stderr and f"more than {MAX_VALUES:,} values" in done.stderr
    assert len(done.stderr.splitlines()) == 2                # the heading and the one problem


def test_alias_budget_allows_ordinary_sharing_and_refuses_cycles_and_depth():
    shared = load_yaml("base: &b {tp: 8, pp: 2}\nruns: [*b, *b, *b]\n")
    assert shared["runs"] == [{"tp": 8, "pp": 2}] * 3
    with pytest.raises(InputError, match="more than 100,000 values") as err:
        load_yaml(alias_bomb(levels=6, fan_out=10))           # 10**6 values
    assert err.value.given.startswith("line 5, column ")     # a4 holds 111,111 values: the first over
    with pytest.raises(InputError, match="an alias inside its own anchor"):
        load_yaml("a: &x [1, *x]\n")
    with pytest.raises(InputError, match=f"nested more than {MAX_DEPTH} deep"):
        load_yaml("[" * 5000 + "]" * 5000)                   # no RecursionError
    with pytest.raises(InputError, match="cannot be read"):
        load_yaml("a: " + "9" * 5000)                         # Python refuses ints over 4300 digits


def test_every_given_is_cut_with_its_full_length():
    text = shorten("x" * 226_000_000)
    assert len(text) < GIVEN_MAX_CHARS + 40 and text.endswith("… (226,000,000 characters)")
    assert shorten(list(range(10**6))).endswith("… (a list of 1,000,000 items)")
    assert shorten({"a": 1}) == "{'a': 1}" and shorten("it's") == '"it\'s"'
    nested = [1]
    for _ in range(60):                       # 9**60 leaves, shared: cut without walking them
        nested = [nested] * 9
    assert len(shorten(nested)) < GIVEN_MAX_CHARS + 40
    problem = str(Problem("model.name", "y" * 10**6, "a short name"))
    assert len(problem) < 300 and "(1,000,000 characters)" in problem


def test_long_set_values_and_flags_are_cut(tmp_path):
    rc, out = validate_in_process(str(SMOKE), "--set", "name=" + "N" * 500_000)   # not [a-z0-9._-]+
    assert rc == EXIT_BAD_INPUT and len(out) < 2000 and "(500,000 characters)" in out
    bomb_value = "[" + ", ".join(["&a [1, 2, 3, 4, 5, 6, 7, 8, 9]"] + [
        f"&a{i} [{', '.join([f'*a{i - 1}' if i > 1 else '*a'] * 9)}]" for i in range(1, 8)]) + "]"
    rc, out = validate_in_process(str(SMOKE), "--set", f"model.layers={bomb_value}")
    assert rc == EXIT_BAD_INPUT and "aliases expanded" in out and len(out) < 2000
    done, _ = cli("run", str(SMOKE), "--hours", "h" * 100_000)
    assert done.returncode == EXIT_BAD_INPUT and len(done.stderr) < 2000 and "(100,000 characters)" in done.stderr
    rc, out = validate_in_process(str(tmp_path / ("d" * 200)) + "/" + "x" * 3000)
    assert rc == EXIT_BAD_INPUT and len(out) < 1000


@pytest.fixture()
def fifo(tmp_path):
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    yield path
    path.unlink(missing_ok=True)


def scenario_with_operators(tmp_path: Path, entry: str) -> Path:
    doc = yaml.safe_load(SMOKE.read_text())
    doc["operators"] = [entry]
    path = tmp_path / "ops.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_dev_zero_as_an_operator_library_exits_2_at_once(tmp_path):
    done, seconds = cli("validate", str(scenario_with_operators(tmp_path, "/dev/zero")), timeout=30)
    assert done.returncode == EXIT_BAD_INPUT and seconds < 5
    line = next(line for line in done.stderr.splitlines() if line.startswith("  - "))
    assert line == ("  - operators[0]: given '/dev/zero'; allowed: an operator library: a regular YAML file of at "
                    "most 4.0 MiB (it is a character device)")


def test_fifos_directories_and_files_over_the_cap_are_refused_without_reading(tmp_path, fifo):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as f:                # sparse: over the cap without writing it
        f.truncate(MAX_INPUT_BYTES + 1)
    cases = {str(fifo): "it is a FIFO", str(tmp_path): "it is a directory", str(big): "it is 4.0 MiB",
             str(tmp_path / "absent.yaml"): "No such file or directory"}
    for entry, why in cases.items():
        start = time.monotonic()
        rc, out = validate_in_process(str(scenario_with_operators(tmp_path, entry)))
        assert rc == EXIT_BAD_INPUT and time.monotonic() - start < 5, out
        assert f"operators[0]: given {entry!r}" in out and f"({why})" in out, out
        rc, out = validate_in_process(entry)                   # the same as the scenario file itself
        assert rc == EXIT_BAD_INPUT and "(file): given" in out and f"({why})" in out, out
    with open(big, "r+b") as f:
        f.truncate(MAX_INPUT_BYTES)               # at the cap it is read: NUL bytes are not YAML
    rc, out = validate_in_process(str(big))
    assert rc == EXIT_BAD_INPUT and "(file): given" in out and len(out) < 2000


# Arbitrary YAML documents: scalars of every type YAML's safe schema builds, nested lists and mappings, put
# at a random place of a valid scenario or given as the whole file.
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-10**80, max_value=10**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=50), st.text(min_size=5000, max_size=20000),
    st.binary(max_size=64), st.dates(), st.datetimes(),
)
KEYS = st.one_of(st.sampled_from(["name", "model", "training", "parallelism", "cluster", "operators", "tp",
                                  "layers", "preset", "emulation", "storage", "faults"]), st.text(max_size=20),
                 st.integers())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=8),
                                                       st.dictionaries(KEYS, inner, max_size=8)), max_leaves=60)
PATHS = st.lists(st.sampled_from(["model", "training", "parallelism", "cluster", "layers", "tp", "operators",
                                  "storage", "faults", "name", "emulation", "seq_len", "instance"]), max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(value=VALUES, where=PATHS, whole=st.booleans())
@example(value={"model": {"layers": [[[[[[[["deep"]]]]]]]]}}, where=[], whole=True)
@example(value=float("nan"), where=["parallelism", "tp"], whole=False)
@example(value="x" * 3_000_000, where=["name"], whole=False)
@example(value=list(range(90_000)), where=["operators"], whole=False)
@example(value=datetime.date(2026, 12, 1), where=["cluster", "instances"], whole=False)
def test_arbitrary_yaml_is_a_valid_scenario_or_exit_2_with_short_output(value, where, whole):
    doc = yaml.safe_load(SMOKE.read_text())
    if whole:
        doc = value
    else:
        node = doc
        for key in where[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[where[-1] if where else "name"] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "arbitrary.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        rc, out = validate_in_process(str(path))
        assert rc in (EXIT_OK, EXIT_BAD_INPUT), out
        assert len(out.encode()) < OUTPUT_MAX_BYTES
        assert "Traceback" not in out
        if rc == EXIT_OK:
            load_scenario(path)                  # what validate accepted loads (while the file still exists)


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.text(max_size=400), st.binary(max_size=400).map(lambda b: b.decode("latin-1"))))
@example(text="a: &a [*a]")
@example(text="%YAML 1.1\n---\n!!python/object:os.system 'ls'\n")
@example(text="--- 1\n--- 2\n")
@example(text="\t\x00\ufeff")
def test_arbitrary_text_is_exit_2_with_short_output(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "text.yaml"
        path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
        rc, out = validate_in_process(str(path))
    assert rc == EXIT_BAD_INPUT and len(out.encode()) < OUTPUT_MAX_BYTES, out
    assert "Traceback" not in out


def test_json_nesting_is_measured_without_recursion_and_refused_beyond_the_bound():
    from ultracluster.yaml_input import json_depth, load_json
    assert json_depth(b'{"a": [1, {"b": "[[[[ \\" {{"}]}') == 3          # brackets inside strings do not count
    assert load_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    start = time.monotonic()
    with pytest.raises(InputError) as err:
        load_json("[" * 1_000_000 + "]" * 1_000_000, "summary.json")        # json.loads: RecursionError
    assert time.monotonic() - start < 5
    assert err.value.given == "summary.json" and f"nested at most {MAX_DEPTH} deep" in err.value.allowed
    with pytest.raises(ValueError):
        load_json("{not json", "x.json")
