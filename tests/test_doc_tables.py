"""Figures quoted in the docs are generated (scripts/doc_tables.py) and kept current here."""
import importlib.util

import pytest

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("doc_tables", REPO / "scripts" / "doc_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_generated_block_is_current(tables):
    assert tables.stale(write=False) == [], "docs tables are stale: run python scripts/doc_tables.py"


def test_every_generator_is_used_and_blocks_name_known_generators(tables):
    used = {m.group(2) for p in tables.DOCS for m in tables.BLOCK.finditer(p.read_text())}
    assert used == set(tables.GENERATORS)
    with pytest.raises(KeyError, match="no generator"):
        tables.render("<!-- table: nope -->\nold\n<!-- /table -->", {})


def test_a_stale_block_is_rewritten(tables):
    cache = {"readme-trust": "new figure\n"}
    out = tables.render("a\n<!-- table: readme-trust -->\nold figure\n<!-- /table -->\nb", cache)
    assert out == "a\n<!-- table: readme-trust -->\nnew figure\n<!-- /table -->\nb"
