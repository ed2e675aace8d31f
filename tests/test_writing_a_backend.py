"""The retriever template in docs/writing-a-backend.md works, and the contract kit tells a broken one apart."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.testing import check_backend

PAGE = Path(__file__).resolve().parent.parent / "docs" / "writing-a-backend.md"


def template_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    retrievers = [b for b in blocks if "class MyMemory(BaseRetrievalMemory)" in b]
    assert len(retrievers) == 1, "docs/writing-a-backend.md must hold one retriever template"
    return retrievers[0]


def build(source: str) -> type:
    namespace: dict = {"__name__": "my_package.memory"}
    exec(compile(source, str(PAGE), "exec"), namespace)  # noqa: S102 - our own docs
    return namespace["MyMemory"]


def factory_for(cls: type, tmp_path: Path):
    counter = iter(range(1000))
    return lambda overrides: cls({"db_path": str(tmp_path / f"m{next(counter)}.db"), **overrides})


def test_the_documented_template_passes_the_contract_kit(tmp_path):
    check_backend(factory_for(build(template_source()), tmp_path))


def test_a_template_whose_query_fails_does_not_pass_the_kit(tmp_path):
    # The old template's _query_backend raised NameError on every query: the base logs it and
    # the turn goes on without recall, so only a check that searches can see it.
    broken = re.sub(r"(def _query_backend\(self, query, top_k, session_id=None\):\n)",
                    r"\1        return [undefined_name]\n", template_source())
    with pytest.raises(AssertionError, match="not recalled|did not find"):
        check_backend(factory_for(build(broken), tmp_path))


def test_the_templates_ram_index_recalls_across_a_restart(tmp_path):
    cls = build(template_source())
    config = {"db_path": str(tmp_path / "m.db")}
    with cls(config) as first:
        first.update_history([AgentMessage(MessageRole.USER, "my boat is called sandpiper"),
                              AgentMessage(MessageRole.ASSISTANT, "a fine name")], "s")
    with cls(config) as second:
        assert [h.source for h in second.search("boat sandpiper", "s")] == ["s_0"]


def test_the_documented_block_memory_passes_the_kit_and_follows_every_inject_mode(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    source = next(b for b in blocks if "class NotesMemory(ContextMemory)" in b)
    namespace: dict = {"__name__": "my_package.rules"}
    exec(compile(source, str(PAGE), "exec"), namespace)  # noqa: S102 - our own docs
    cls = namespace["NotesMemory"]
    check_backend(lambda overrides: cls(overrides))
    memory = cls({"inject_mode": "user"})
    memory.update_history([AgentMessage(MessageRole.USER, "note: the boiler code is 4471"),
                           AgentMessage(MessageRole.ASSISTANT, "noted")], "s")
    ctx = memory.build_conversation_context("what is the boiler code?", "s")
    assert [m.role for m in ctx] == [MessageRole.USER] and "- the boiler code is 4471" in ctx[0].content
