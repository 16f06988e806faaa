"""scripts/mutations.py stays runnable and its published table current, without running it (it takes minutes):
every mutation's text is still in the model's source exactly once, and docs/design.md lists every mutation,
each caught by the test of its own quantity."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mutations(load_script):
    return load_script("mutations")


def test_every_mutation_still_applies(mutations):
    for m in mutations.MUTATIONS:
        texts: dict[str, str] = {}
        for rel, old, new in m.edits:
            text = texts.setdefault(rel, (REPO / rel).read_text())
            assert text.count(old) == 1, f"{m.name}: {old!r} is no longer in {rel} exactly once"
            texts[rel] = text.replace(old, new)
        assert m.own, m.name


def test_the_published_table_lists_every_mutation_caught_by_its_own_test(mutations):
    doc = (REPO / "docs" / "design.md").read_text()
    block = doc.split(mutations.BEGIN, 1)[1].split(mutations.END, 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|.*\| (yes|\*\*no\*\*) \|$", block, re.M)
    assert [name for name, _ in rows] == [m.name for m in mutations.MUTATIONS], \
        "docs/design.md is stale: run python scripts/mutations.py --write"
    assert all(own == "yes" for _, own in rows)
