"""The docs say what the code does: each backend page holds the config table generated from its Config."""
from __future__ import annotations

import re
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


# -- docs/compatibility.md ---------------------------------------------------------------------
def _compatibility_rows() -> list[tuple[str, str, str]]:
    """``(page, key, default cell)`` of every row of compatibility.md's config table."""
    rows = []
    text = (DOCS / "compatibility.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[1].startswith("`") and cells[0] != "backend":
            for page in cells[0].split(", "):
                rows.append((page, cells[1].strip("`"), cells[2]))
    return rows


def test_the_compatibility_table_states_the_defaults_the_code_has():
    from ovos_memory_plugins._cli.docs_tables import _config_cls, _default

    rows = _compatibility_rows()
    assert len(rows) > 60 and {page for page, _, _ in rows} == set(PAGES) - {"redis"}
    for page, key, cell in rows:
        fields = dict(config_keys(_config_cls(PAGES[page])))
        assert key in fields, f"compatibility.md names {page} key {key!r}, which the code does not have"
        assert cell == _default(fields[key]), f"compatibility.md: {page} {key} defaults to {_default(fields[key])}"


# -- links -------------------------------------------------------------------------------------
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (GitHub's rules)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: link to {target} (no such file)"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link to {target} (no such heading)"
