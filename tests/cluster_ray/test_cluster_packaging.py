"""Packaging for clusters: the wheel carries the operator library and every package and data file; the
Dockerfile and the KubeRay RayJob agree with pyproject on the Ray and Python versions (no docker engine
here: both are parsed)."""
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ultracluster.operators import load_library

try:
    import tomllib
except ImportError:   # Python 3.10: pyproject's test extra installs tomli there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def ray_pin() -> str:
    pins = [d for d in PYPROJECT["project"]["dependencies"] if re.match(r"ray(\[.*\])?==", d)]
    assert len(pins) == 1, PYPROJECT["project"]["dependencies"]
    return pins[0].split("==")[1]


def python_minors() -> set[str]:
    """Python minors pyproject declares (classifiers), all of them allowed by requires-python."""
    floor = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert floor, PYPROJECT["project"]["requires-python"]
    minors = {c.rsplit(" :: ", 1)[1] for c in PYPROJECT["project"]["classifiers"]
              if re.fullmatch(r"Programming Language :: Python :: \d+\.\d+", c)}
    assert minors
    for m in minors:
        assert tuple(map(int, m.split("."))) >= (int(floor[1]), int(floor[2])), m
    return minors


def dockerfile() -> dict:
    """ARG defaults (first declaration), the resolved FROM image, USER, COPY sources and destinations."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    args, base, user, copies = {}, None, None, []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        op = words[0].upper()
        if op == "ARG" and "=" in words[1]:
            k, v = words[1].split("=", 1)
            args.setdefault(k, v)
        elif op == "FROM":
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], words[1])
        elif op == "USER":
            user = words[1]
        elif op == "COPY":
            paths = [w for w in words[1:] if not w.startswith("--")]
            copies.append((paths[:-1], paths[-1]))
    return {"args": args, "from": base, "user": user, "copies": copies, "text": text}


def rayjob() -> dict:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "rayjob.yaml").read_text()) if d]
    jobs = [d for d in docs if d.get("kind") == "RayJob"]
    assert len(jobs) == 1
    return jobs[0]


def test_the_test_extra_brings_a_toml_reader_to_every_supported_python():
    """tomllib is in the standard library from Python 3.11; pyproject's test extra adds tomli below that, so the
    tests that read pyproject run (not skip) on every Python the classifiers name."""
    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]]
    (tomli,) = [r for r in reqs if r.name == "tomli"]
    versions = [c.rsplit(" :: ", 1)[1] for c in PYPROJECT["project"]["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert "3.10" in versions
    for v in versions:
        needs = tuple(map(int, v.split("."))) < (3, 11)
        assert tomli.marker.evaluate({"python_version": v}) is needs, v


def test_dockerfile_uses_rays_image_with_pyprojects_ray_and_python():
    df = dockerfile()
    ray_version, py = df["args"]["RAY_VERSION"], df["args"]["PYTHON_VERSION"]
    assert ray_version == ray_pin()
    assert py in python_minors()
    assert df["args"]["PYTHON_TAG"] == "py" + py.replace(".", "")
    assert df["from"] == f"rayproject/ray:{ray_pin()}-py{py.replace('.', '')}-cpu"
    assert df["user"] == "ray"                              # the image's non-root user
    assert "pip install --no-cache-dir /tmp/ultracluster-src" in df["text"]   # a regular, non-editable install
    assert "-e " not in df["text"].split("pip install", 1)[1].split("&&", 1)[0]


def test_dockerfile_copies_only_what_exists_and_dockerignore_lets_through():
    df = dockerfile()
    allowed = {ln[1:].strip() for ln in (REPO / ".dockerignore").read_text().splitlines() if ln.startswith("!")}
    sources = [s for srcs, _ in df["copies"] for s in srcs]
    assert {"ultracluster", "operators", "scenarios", "pyproject.toml"} <= set(sources)
    for s in sources:
        assert (REPO / s).exists(), s
        assert s in allowed, f".dockerignore keeps {s} out of the build context"


def test_rayjob_runs_a_shipped_scenario_from_the_image_with_matching_versions():
    job = rayjob()
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    cluster = spec["rayClusterSpec"]
    assert cluster["rayVersion"] == ray_pin() == dockerfile()["args"]["RAY_VERSION"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    images = {c["image"] for g in groups for c in g["template"]["spec"]["containers"]}
    assert len(images) == 1
    image = images.pop()
    py = dockerfile()["args"]["PYTHON_VERSION"]
    assert image.endswith(f":{PYPROJECT['project']['version']}-ray{ray_pin()}-py{py.replace('.', '')}")
    # the entrypoint runs a scenario the Dockerfile copies to /home/ray/scenarios
    words = spec["entrypoint"].split()
    assert words[:2] == ["ultracluster", "run"]
    scenario = Path(words[2])
    (image_dir,) = [Path(dest) for srcs, dest in dockerfile()["copies"] if srcs == ["scenarios"]]
    assert scenario.parent == image_dir and (REPO / "scenarios" / scenario.name).is_file()
    out = Path(words[words.index("--out") + 1])
    mounts = [m["mountPath"] for c in cluster["headGroupSpec"]["template"]["spec"]["containers"]
              for m in c.get("volumeMounts", [])]
    assert any(out.is_relative_to(m) for m in mounts), (out, mounts)   # the driver (on the head) writes there
    # actors go where `ultracluster_shard` is advertised: the workers, never the head; never neuron_cores
    assert cluster["headGroupSpec"]["rayStartParams"].get("num-cpus") == "0"
    for g in cluster["workerGroupSpecs"]:
        res = json.loads(json.loads(g["rayStartParams"]["resources"]))
        assert res.get("ultracluster_shard", 0) >= 1 and "neuron_cores" not in res
    assert "resources" not in cluster["headGroupSpec"]["rayStartParams"]


def test_the_image_and_the_rayjob_run_ray_with_token_authentication():
    """Secure by default (docs/ray-clusters.md, "Token authentication"): every Ray process of the image runs with
    RAY_AUTH_MODE=token, and KubeRay makes the cluster's token (authOptions) for the RayJob; no container turns it
    off."""
    env = [ln.split(None, 1)[1] for ln in dockerfile()["text"].splitlines() if ln.split()[:1] == ["ENV"]]
    assert "RAY_AUTH_MODE=token" in env
    cluster = rayjob()["spec"]["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"}
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for c in (c for g in groups for c in g["template"]["spec"]["containers"]):
        assert all(not (e["name"] == "RAY_AUTH_MODE" and e.get("value") != "token") for e in c.get("env", []))


def test_wheel_ships_operator_library_packages_and_data(tmp_path):
    """`pip wheel` a copy of the tree; the wheel alone (no source tree) loads the operator library."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("ultracluster", "operators"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w",
                           str(tmp_path / "dist")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("ultracluster-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for y in (REPO / "operators").glob("*.yaml"):
        assert f"ultracluster/operators_library/{y.name}" in names
    for f in (REPO / "ultracluster").rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            rel = f.relative_to(REPO).as_posix()
            assert rel in names, f"{rel} is not in the wheel: list its package in pyproject [tool.setuptools]"
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = subprocess.run(
        [sys.executable, "-c", "import ultracluster, ultracluster.operators as o; "
         "print(ultracluster.__file__); print(o.LIBRARY_DIR); print(len(o.load_library()))"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": ""})
    assert probe.returncode == 0, probe.stderr
    pkg_file, library_dir, n_ops = probe.stdout.split()
    assert Path(pkg_file).is_relative_to(site)
    assert Path(library_dir) == site / "ultracluster" / "operators_library"
    assert int(n_ops) == len(load_library()) > 0


def test_earlier_results_stay_out_of_git_and_of_a_jobs_upload():
    """`ray job submit --working-dir .` skips what .gitignore and .rayignore name: never the earlier runs, plans
    and comparisons (docs/ray-clusters.md); the documented submit names them in its `excludes` too."""
    for name in (".gitignore", ".rayignore"):
        lines = {ln.strip() for ln in (REPO / name).read_text().splitlines()}
        assert {"runs/", "plans/", "compare/"} <= lines, name
    for doc in ("README.md", "docs/ray-clusters.md", "docs/plan.md"):
        commands = (REPO / doc).read_text().replace("\\\n", " ").splitlines()      # continuation lines joined
        submits = [ln for ln in commands if "ray job submit --address" in ln]
        assert submits and all('"excludes": ["runs/", "plans/"]' in ln for ln in submits), doc
