"""The `chromium` fixture of the browser test: a Chromium found, never installed, by the tests.

`CHROMIUM` names one, else the first of `chromium`, `chromium-browser`, `google-chrome` on the PATH. With
none, the tests that use the fixture are skipped with one summary line saying how to enable them, except
in CI (`CI=true`), where they fail: the browser test must never silently drop out of CI.
"""
from __future__ import annotations

import os
import shutil

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    """The browser to drive: `CHROMIUM` when set (None if it is not an executable), else one on the PATH."""
    given = os.environ.get("CHROMIUM")
    if given:
        return given if os.path.isfile(given) and os.access(given, os.X_OK) else None
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def missing() -> str:
    if os.environ.get("CHROMIUM"):
        return f"CHROMIUM={os.environ['CHROMIUM']} is not an executable"
    return f"no {', '.join(BROWSERS)} on the PATH"


def pytest_collection_modifyitems(config, items):
    """Outside CI, without a browser: a skip mark on each browser test (pytest folds them into one line)."""
    if find_chromium() is not None or os.environ.get("CI") == "true":
        return
    skip = pytest.mark.skip(reason=f"browser test of report.html: {missing()}; to enable it, install Chromium "
                                   "(Debian/Ubuntu: apt-get install chromium) or set CHROMIUM=/path/to/chrome")
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of the Chromium to drive; in CI a missing one fails the tests that need it."""
    found = find_chromium()
    if found is None:
        pytest.fail(f"browser test of report.html in CI: {missing()}; .ci/run installs Debian's chromium",
                    pytrace=False)
    return found
