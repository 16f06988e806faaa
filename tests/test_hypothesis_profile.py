"""The Hypothesis profile is the same with CI set and without (tests/conftest.py): derandomized, no example
database, so a property that fails anywhere fails everywhere."""
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]


def test_the_profile_in_force_is_derandomized_without_a_database():
    assert settings.default.database is None
    assert settings.default.derandomize is True or settings._current_profile == "explore"   # asked for by name


def test_ci_or_not_the_same_profile_loads():
    """In a fresh pytest with CI set and with it unset, the profile is the same one."""
    probe = ("from hypothesis import settings; s = settings.default; print(s.derandomize, s.database, "
             "s.max_examples, s.deadline, sorted(map(str, s.suppress_health_check)), s.print_blob, list(s.phases))")
    seen = set()
    for ci in ("true", None):
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS", "TF_BUILD")}
        if ci:
            env["CI"] = ci
        code = ("import sys; sys.path.insert(0, 'tests'); import conftest; " + probe)
        out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                             check=True).stdout.strip()
        seen.add(out)
    assert len(seen) == 1 and seen.pop().startswith("True None"), seen
