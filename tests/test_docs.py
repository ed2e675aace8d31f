"""The docs say what the code does: each backend page holds the config table generated from its Config."""
from __future__ import annotations

from pathlib import Path

import pytest

from ovos_memory_plugins._cli.docs_tables import END, PAGES, START, config_table, page_path, refresh_page, render_block
from ovos_memory_plugins.config import config_keys
from ovos_memory_plugins.short_term import ShortTermConfig
from tests.conftest import our_entry_points

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_every_entry_point_of_the_distribution_has_a_docs_page():
    assert {ep.name for ep in our_entry_points()} <= set(PAGES.values())


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_backend_page_holds_the_config_table_generated_from_the_code(name):
    path = page_path(name, DOCS)
    assert path.exists(), f"{path} is missing; run: make docs"
    text = path.read_text(encoding="utf-8")
    assert render_block(PAGES[name]) in text, (
        f"{path.name}: the config table differs from the code; run: make docs")


def test_the_generated_table_lists_every_key_with_its_default():
    table = config_table("ovos-memory-plugin-short-term")
    for key, _field in config_keys(ShortTermConfig):
        assert f"| `{key}` |" in table
    assert "| `max_history` | `5` |" in table


def test_nested_keys_are_spelled_dotted_and_choices_are_listed():
    table = config_table("ovos-memory-plugin-lexical")
    assert "| `retrieval.max_num_results` | `5` |" in table
    assert '`"system_prompt"`' in table  # one of the inject modes


def test_refreshing_a_page_replaces_only_the_marked_block():
    page = f"# Title\n\nProse before.\n\n{START}\n| stale |\n{END}\n\nProse after.\n"
    new = refresh_page(page, "ovos-memory-plugin-recency")
    assert new.startswith("# Title\n\nProse before.\n\n") and new.endswith("\n\nProse after.\n")
    assert "| stale |" not in new and "`max_age`" in new


def test_a_page_without_markers_gets_the_block_after_its_config_heading():
    page = "# T\n\n## Config\n\nHand-written notes.\n"
    new = refresh_page(page, "ovos-memory-plugin-recency")
    assert new.index(START) > new.index("## Config") and new.index(END) < new.index("Hand-written notes.")
    assert refresh_page(new, "ovos-memory-plugin-recency") == new


def test_the_docs_table_command_prints_the_same_table(capsys):
    from ovos_memory_plugins.cli import main

    assert main(["docs-table", "ovos-memory-plugin-recency"]) == 0
    assert capsys.readouterr().out.strip() == config_table("ovos-memory-plugin-recency")
