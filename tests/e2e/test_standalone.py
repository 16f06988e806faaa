"""The product stands alone: a clone with nothing beside it holds every file it needs, and no tracked file
reads or names the team's workshop folder next to the checkout."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = "../" + "shared"   # spelled in two parts so this file does not name it


def _git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """`git clone` of this repository into an empty temporary folder (its committed files only)."""
    if shutil.which("git") is None or _git("rev-parse", "--git-dir", cwd=REPO).returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the stand-alone test needs git and a git checkout; CI must run it", pytrace=False)
        pytest.skip("not a git checkout: the stand-alone test clones the repository (run it from a clone)")
    empty = tmp_path_factory.mktemp("fresh")
    done = _git("clone", "--quiet", "--no-hardlinks", str(REPO), str(empty / "ultracluster"), cwd=empty)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in empty.iterdir()] == ["ultracluster"]   # nothing beside it
    return empty / "ultracluster"


def test_no_tracked_file_names_the_folder_outside(clone):
    files = _git("ls-files", "-z", cwd=clone).stdout.split("\0")
    assert len(files) > 50
    naming = []
    for name in filter(None, files):
        text = (clone / name).read_bytes().decode("utf-8", errors="replace")
        naming += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1)
                   if OUTSIDE in line or OUTSIDE.replace("/", "\\") in line]
    assert naming == [], f"tracked files read or name {OUTSIDE!r} (a user's clone has nothing beside it): {naming}"


def test_the_clone_carries_what_the_product_reads(clone):
    for path in ("data/calibration/training.csv", "data/calibration/collectives.csv", "docs/design.md",
                 "docs/sources.md", "scenario.schema.json", "ultracluster/calibration/calibration.json"):
        assert (clone / path).is_file(), path
