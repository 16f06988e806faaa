"""One meaning per word (docs/design.md, "Words"): a name with another meaning does not come back.

"price" is dollars (seconds are times), "plan" the planner, "profile" a calibration profile, "chunk" a pipeline
model chunk, "group" a collective group; and no module imports another's private name.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ultracluster"
CODE = [p for top in ("ultracluster", "tests", "scripts", "benchmarks") for p in sorted((ROOT / top).rglob("*.py"))
        if p.name != "test_words.py"]

# names that use a word for another meaning, and what they are called now
BANNED = {
    r"[Pp]ricers?": "seconds are evaluated: Evaluator, evaluator",
    r"[A-Z]\w*Prices|Prices": "seconds are times: StageTimes, CommTimes, MemoCommTimes",
    r"PRICING\w*|pricing_values|merge_prices|priced_stages|stage_prices|price_variant|price_for_ranking|_price_all":
        "seconds are times: TIMING_KEYS, merge_stage_times, timed_stages, evaluate_variant, time_for_ranking",
    r"ShardProfile|MergedProfile|ComputeProfile|merge_profiles|combine_profiles":
        "a shard's per-step answer is a shard step: ShardStep, MergedSteps, merge_shard_steps",
    r"evaluate_chunk|_ring_chunks|send_chunks|recv_chunks|chunks_sent":
        "Ray task pieces are blocks, payload pieces segments: evaluate_block, send_segments",
    r"storage_plan|degraded_plan|_plan_uniform": "the step's comm, the storage traffic: degraded_comm, storage_traffic",
    r"\w*pricing\w*|settings_priced|intervals_priced|priced_as|\w*_priced_(as|by|exactly)\w*|\w*_pricers?_\w*":
        "seconds are timed: settings_timed, intervals_timed, timed_as (plan.json keeps its old keys one release)",
    r"\w*network_profiles?\w*|NETWORK_PROFILES|timed_profiles|profile_bytes":
        "a named collective calibration is a network calibration: network_calibrations, with_network_calibration; "
        "a shard's answer is a shard step (shard_step_bytes)",
}
# modules whose names misled, and where their code is now
GONE = {
    "layouts/fast.py": "layouts/steps.py", "layouts/parts.py": "layouts/batched_parts.py",
    "layouts/search.py": "layouts/ranking.py", "layouts/pricer.py": "layouts/evaluator.py",
    "network/pricing.py": "network/timing.py", "sweep/price.py": "sweep/evaluate.py",
    "replay/profile.py": "replay/shard_steps.py", "cluster/profile.py": "calibration/profile.py",
}


def _names(path: Path) -> list[tuple[int, str]]:
    toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [(t.start[0], t.string) for t in toks if t.type == tokenize.NAME]


def test_no_name_uses_a_word_for_another_meaning():
    found = []
    for path in CODE:
        for line, name in _names(path):
            for pattern, instead in BANNED.items():
                if re.fullmatch(pattern, name):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {name} ({instead})")
    assert found == [], "names with another meaning (docs/design.md, \"Words\"):\n" + "\n".join(found)


def test_only_collective_groups_are_classes_called_group_and_only_calibration_profiles_profiles():
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            if "Group" in node.name and rel != "network/groups.py":
                found.append(f"{rel}: class {node.name} (a group is a collective group)")
            if "Profile" in node.name and rel != "calibration/profile.py":
                found.append(f"{rel}: class {node.name} (a profile is a calibration profile)")
    assert found == []


def test_the_modules_that_misled_are_gone():
    left = [f"ultracluster/{old} (now {new})" for old, new in GONE.items() if (PACKAGE / old).exists()]
    assert left == []


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path in PACKAGE.rglob("*.py"):
        here = _module(path)
        pkg = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("ultracluster") or mod == here:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {mod} import {alias.name}")
    assert found == [], "private names are the real interfaces: make them public\n" + "\n".join(found)
