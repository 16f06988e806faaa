"""Bad scenarios -> ScenarioError naming the field path and the value given, through the API and the CLI."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ultracluster.errors import Problem, ScenarioError
from ultracluster.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]

BASE = {
    "name": "llama31-8b-tp32",
    "model": {"preset": "llama3.1-8b"},
    "training": {"seq_len": 8192, "global_batch": 1024},
    "parallelism": {"tp": 32},
    "cluster": {"instance": "trn1.32xlarge", "instances": 32},
}


def _merge(base: dict, changes: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


MALFORMED = "name: broken\nmodel:\n  preset: llama3.1-8b\ntraining: {seq_len: 8192, global_batch: 1024\ncluster: x\n"

# id -> (scenario changes or raw YAML text, --set overrides, path, given)
CASES: dict[str, tuple[dict | str, list[str], str, object]] = {
    "unknown top-level key": ({"colour": "blue"}, [], "colour", "blue"),
    "nested key typo": ({"parallelism": {"tpp": 8}}, [], "parallelism.tpp", 8),
    "string for an integer": ({"training": {"seq_len": "8192"}}, [], "training.seq_len", "8192"),
    "bool for an integer": ({"parallelism": {"tp": True}}, [], "parallelism.tp", True),
    "negative count": ({"cluster": {"instances": -2}}, [], "cluster.instances", -2),
    "bad enum": ({"training": {"precision": "fp16"}}, [], "training.precision", "fp16"),
    "product != ranks": ({"parallelism": {"dp": 3}}, [], "parallelism", "tp 32 x pp 1 x cp 1 x dp 3 = 96"),
    "ranks not divisible": ({"parallelism": {"tp": 24}}, [], "parallelism", "tp 24 x pp 1 x cp 1 = 24 (dp not given)"),
    "heads % tp": ({"parallelism": {"tp": 64}}, [], "parallelism.tp", 64),
    "kv_heads vs tp": (
        {"model": {"preset": None, "layers": 32, "hidden": 6144, "heads": 48, "kv_heads": 12, "ffn": 16384,
                   "mlp": "swiglu", "vocab": 32000}, "parallelism": {"tp": 8}},
        [], "parallelism.tp", 8,
    ),
    "heads % kv_heads": ({"model": {"kv_heads": 5}}, [], "model.kv_heads", 5),
    "pp > layers": ({"parallelism": {"tp": 16, "pp": 64}}, [], "parallelism.pp", 64),
    "global_batch % dp": ({"training": {"global_batch": 1000}}, [], "training.global_batch", 1000),
    "seq_len % cp": ({"training": {"seq_len": 8191}, "parallelism": {"tp": 16, "cp": 2}}, [], "training.seq_len", 8191),
    "sequence_parallel without tp": (
        {"parallelism": {"tp": 1, "sequence_parallel": True}}, [], "parallelism.sequence_parallel", True,
    ),
    "lnc on trn1": ({"cluster": {"lnc": 2}}, [], "cluster.lnc", 2),
    "lnc 4 on trn2": ({"cluster": {"instance": "trn2.48xlarge", "instances": 16, "lnc": 4}}, [], "cluster.lnc", 4),
    "ultraserver on trn1": ({"cluster": {"ultraserver": True}}, [], "cluster.ultraserver", True),
    "ultraserver of 6 instances": (
        {"cluster": {"instance": "trn2u.48xlarge", "instances": 6}}, [], "cluster.instances", 6,
    ),
    "bad name": ({"name": "Llama 8B"}, [], "name", "Llama 8B"),
    "bad preset": ({"model": {"preset": "llama4-8b"}}, [], "model.preset", "llama4-8b"),
    "malformed YAML": (MALFORMED, [], "(file)", "line 5, column 8: expected ',' or '}', but got ':'"),
    "--set through a non-mapping": ({}, ["name.first=x"], "name.first", "name.first=x"),
    "--set without =": ({}, ["parallelism.tp"], "--set", "parallelism.tp"),
    "--set unknown key": ({}, ["parallelism.pipeline=4"], "parallelism.pipeline", 4),
    "ep without moe": ({"parallelism": {"ep": 2}}, [], "parallelism.ep", 2),
    "ep not dividing experts": (
        {"model": {"preset": "mixtral-8x7b"}, "parallelism": {"tp": 8, "ep": 3}}, [], "parallelism.ep", 3,
    ),
    "top_k > experts": ({"model": {"moe": {"experts": 2, "top_k": 4}}}, [], "model.moe.top_k", 4),
    "interleaved without virtual_stages": (
        {"parallelism": {"tp": 8, "pp": 4, "pp_schedule": "interleaved"}}, [], "parallelism.virtual_stages", 1,
    ),
    "virtual_stages without interleaved": (
        {"parallelism": {"tp": 8, "pp": 4, "virtual_stages": 2}}, [], "parallelism.virtual_stages", 2,
    ),
    "payload_scale > 1": ({"emulation": {"payload_scale": 2}}, [], "emulation.payload_scale", 2),
    "instances_per_actor 0": ({"emulation": {"instances_per_actor": 0}}, [], "emulation.instances_per_actor", 0),
    "straggler fraction > 1": (
        {"faults": {"stragglers": {"fraction": 1.5, "slowdown": 2}}}, [], "faults.stragglers.fraction", 1.5,
    ),
    "unknown storage deployment": (
        {"storage": {"kind": "fsx-lustre", "deployment": "SCRATCH_1", "capacity_tib": 1.2,
                     "throughput_mbps_per_tib": 200}},
        [], "storage.deployment", "SCRATCH_1",
    ),
}


def _write(tmp_path: Path, doc: dict | str) -> Path:
    path = tmp_path / "scenario.yaml"
    text = doc if isinstance(doc, str) else yaml.safe_dump(_merge(BASE, doc), sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


def _problems(path: Path, overrides: list[str] = ()) -> list[Problem]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path, overrides)
    assert caught.value.source == str(path)
    return caught.value.problems


def test_base_scenario_is_valid(tmp_path: Path) -> None:
    assert load_scenario(_write(tmp_path, {})).parallelism.dp == 32


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_scenario_names_path_and_value(tmp_path: Path, case: str) -> None:
    doc, overrides, path, given = CASES[case]
    problems = _problems(_write(tmp_path, doc), overrides)
    assert given in [p.given for p in problems if p.path == path], problems
    assert all("https://" not in p.allowed for p in problems)


def test_messages_say_what_is_allowed(tmp_path: Path) -> None:
    def allowed(case: str) -> str:
        doc, overrides, path, _ = CASES[case]
        return next(p.allowed for p in _problems(_write(tmp_path, doc), overrides) if p.path == path)

    assert allowed("nested key typo").startswith("no such key; allowed keys here: tp, pp, dp, cp, ep,")
    assert "did you mean tp?" in allowed("nested key typo")
    assert allowed("string for an integer") == "an integer >= 1"
    assert allowed("bad enum") == "one of: bf16, fp8, fp32, mxfp8, mxfp4"
    assert allowed("product != ranks") == "tp*pp*cp*dp = ranks = 32 instances x 32 NeuronCores / lnc 1 = 1024"
    assert allowed("heads % tp") == "a divisor of model.heads (32)"
    assert "model.kv_heads (12)" in allowed("kv_heads vs tp")
    assert allowed("pp > layers") == "at most model.layers (32)"
    assert allowed("global_batch % dp") == "a multiple of dp x micro_batch = 32 x 1 = 32"
    assert "exists only on Trainium2" in allowed("lnc on trn1")
    assert "only trn2u.48xlarge" in allowed("ultraserver on trn1")
    assert allowed("bad preset").startswith("one of: llama2-7b, llama2-13b,")
    assert allowed("payload_scale > 1") == "a number > 0 and <= 1"
    assert allowed("malformed YAML") == "well-formed YAML"


def test_many_faults_are_reported_at_once(tmp_path: Path) -> None:
    doc = {
        "colour": "blue",
        "name": "Bad Name",
        "model": {"kv_heads": 5},
        "training": {"global_batch": 1001},
        "parallelism": {"tp": 8, "pp": 64},
        "cluster": {"ultraserver": True},
    }
    paths = [p.path for p in _problems(_write(tmp_path, doc), ["emulation.payload_scale=0", "faults.x=1"])]
    assert set(paths) == {
        "colour", "name", "model.kv_heads", "training.global_batch", "parallelism.tp", "parallelism.pp",
        "cluster.ultraserver", "emulation.payload_scale", "faults.x",
    }


def test_unknown_preset_does_not_add_missing_shape_fields(tmp_path: Path) -> None:
    problems = _problems(_write(tmp_path, {"model": {"preset": "llama4-8b"}}))
    assert [p.path for p in problems] == ["model.preset"]


def test_missing_file_and_non_mapping(tmp_path: Path) -> None:
    (problem,) = _problems(tmp_path / "absent.yaml")
    assert problem.path == "(file)" and "absent.yaml" in problem.given
    (problem,) = _problems(_write(tmp_path, "- just\n- a list\n"))
    assert problem == Problem("(file)", "a list of 2 items", problem.allowed)      # what it is, not what it holds
    (problem,) = _problems(_write(tmp_path, "name: a\nname: b\n"))
    assert problem.given == "line 2, column 1: found duplicate key 'name'"


def test_missing_required_fields(tmp_path: Path) -> None:
    problems = _problems(_write(tmp_path, "name: x\nmodel: {layers: 2}\ntraining: {seq_len: 8}\n"))
    missing = {p.path for p in problems if p.given == "<missing>"}
    assert missing == {"model.hidden", "model.heads", "model.ffn", "model.mlp", "model.vocab",
                       "training.global_batch", "cluster"}


def test_scenario_error_pickles_and_prints() -> None:
    error = ScenarioError([Problem("parallelism.tp", 3, "a divisor of model.heads (32)")], source="x.yaml")
    copy_ = pickle.loads(pickle.dumps(error))
    assert copy_.problems == error.problems and copy_.source == "x.yaml"
    assert str(copy_) == (
        "scenario x.yaml has 1 problem(s):\n  - parallelism.tp: given 3; allowed: a divisor of model.heads (32)"
    )


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_scenario_through_cli(tmp_path: Path, case: str) -> None:
    doc, overrides, path, given = CASES[case]
    command = [sys.executable, "-m", "ultracluster", "validate", str(_write(tmp_path, doc))]
    for override in overrides:
        command += ["--set", override]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert any(line.startswith(f"  - {path}:") and repr(given) in line for line in lines), done.stderr


def test_interleaved_needs_microbatches_in_groups_of_pp(scenarios_dir) -> None:
    """Megatron's interleaved schedule runs microbatches in groups of pp: 48 / (dp 4 x 1) = 12 is fine for
    pp 2, 40 / 4 = 10 is not a multiple of pp 4 (the executed schedule would run extra microbatches)."""
    from ultracluster import load_scenario
    base = ["parallelism.pp_schedule=interleaved", "parallelism.virtual_stages=2"]
    ok = load_scenario(scenarios_dir / "smoke.yaml", base + ["parallelism.pp=2", "training.global_batch=48"])
    assert ok.training.global_batch // (ok.parallelism.dp * ok.training.micro_batch) % ok.parallelism.pp == 0
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenarios_dir / "smoke.yaml", base + ["parallelism.pp=4", "parallelism.tp=4",
                                                            "training.global_batch=40"])
    probs = [p for p in err.value.problems if p.path == "training.global_batch"]
    assert probs and "a multiple of pp (4)" in probs[0].allowed
