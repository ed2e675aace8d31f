"""Which endpoint the LLM memories use (their own api_url, else the persona's chat endpoint, else
the default), and check-config's warning when the default is left and nothing answers there."""
from __future__ import annotations

import json

import pytest

from ovos_memory_plugins._cli import check
from ovos_memory_plugins._cli.persona import MemorySlot, load_persona, persona_endpoint
from ovos_memory_plugins._core import log as _log
from ovos_memory_plugins._llm import endpoint as endpoint_module
from ovos_memory_plugins._llm.endpoint import DEFAULT_API_URL
from ovos_memory_plugins.cli import main

ENTITY = "ovos-memory-plugin-entity"
COMPOSITE = "ovos-memory-plugin-composite"
CHAT_URL = "http://127.0.0.1:8790/v1"


def write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


def persona_file(tmp_path, block, module=ENTITY, chat_url=CHAT_URL):
    handler = {"allow_system_prompts": True, "model": "chat-model"} | ({"api_url": chat_url} if chat_url else {})
    return write(tmp_path / "p.json", {"handlers": ["ovos-chat-openai-plugin"], "ovos-chat-openai-plugin": handler,
                                       "memory_module": module, module: block})


@pytest.fixture
def nothing_answers(monkeypatch):
    probes = []
    monkeypatch.setattr(check, "_listing_status", lambda url: probes.append(url) or None)
    return probes


# -- the persona's endpoint ---------------------------------------------------------------------------
def test_a_memory_without_api_url_uses_the_personas_chat_endpoint_and_says_so_once(tmp_path, monkeypatch):
    said = []
    monkeypatch.setattr(_log.LOG, "info", lambda msg, *a: said.append(msg))
    monkeypatch.setattr(endpoint_module, "_SAID", set())  # said once per process: maybe by an earlier test
    persona = load_persona(persona_file(tmp_path, {"backend": "memory"}))
    slot = MemorySlot(persona.memory_module, persona.memory_config, endpoint=persona_endpoint(persona))
    try:
        assert slot.memory.client.api_url == CHAT_URL and slot.memory.client.model == "chat-model"
        assert [m for m in said if "LLM endpoint" in m] == [
            f"{ENTITY}: LLM endpoint {CHAT_URL} (the persona's chat handler 'ovos-chat-openai-plugin')"]
    finally:
        slot.close()


def test_the_endpoint_is_said_once_per_process_however_often_a_memory_is_built(monkeypatch):
    from ovos_memory_plugins.entity import EntityMemory

    said = []
    monkeypatch.setattr(_log.LOG, "info", lambda msg, *a: said.append(msg))
    monkeypatch.setattr(endpoint_module, "_SAID", set())
    for _ in range(3):  # as a composite does, trying again a member whose store does not answer
        EntityMemory({"backend": "memory", "api_url": "http://127.0.0.1:9/v1"}).close()
    assert [m for m in said if "LLM endpoint" in m] == [f"{ENTITY}: LLM endpoint http://127.0.0.1:9/v1 (api_url)"]


def test_the_memorys_own_api_url_wins_over_the_personas(tmp_path):
    own = "http://127.0.0.1:9/v1"
    persona = load_persona(persona_file(tmp_path, {"backend": "memory", "api_url": own}))
    slot = MemorySlot(persona.memory_module, persona.memory_config, endpoint=persona_endpoint(persona))
    try:
        assert slot.memory.client.api_url == own
        assert slot.memory.client.model == "", "the persona's model goes with the persona's endpoint only"
    finally:
        slot.close()


def test_a_composites_llm_member_uses_the_personas_chat_endpoint(tmp_path):
    block = {"members": [{"module": "ovos-memory-plugin-recency"}, {"module": ENTITY, "config": {"backend": "memory"}}]}
    persona = load_persona(persona_file(tmp_path, block, module=COMPOSITE))
    slot = MemorySlot(persona.memory_module, persona.memory_config, endpoint=persona_endpoint(persona))
    try:
        entity = next(m.memory for m in slot.memory.members if m.module == ENTITY)
        assert entity.client.api_url == CHAT_URL
        assert entity.settings.api_url == CHAT_URL
    finally:
        slot.close()


def test_without_a_persona_endpoint_the_default_is_used(tmp_path):
    persona = load_persona(persona_file(tmp_path, {"backend": "memory"}, chat_url=None))
    assert persona_endpoint(persona) is None
    slot = MemorySlot(persona.memory_module, persona.memory_config, endpoint=persona_endpoint(persona))
    try:
        assert slot.memory.client.api_url == DEFAULT_API_URL
    finally:
        slot.close()


# -- check-config -----------------------------------------------------------------------------------------
def test_check_config_warns_when_an_llm_member_is_left_on_a_default_endpoint_that_does_not_answer(
        tmp_path, capsys, nothing_answers):
    path = write(tmp_path / "b.json", {"backend": "memory"})
    assert main(["check-config", path, "--module", ENTITY]) == 0
    out = capsys.readouterr()
    said, warned = " ".join(out.out.split()), " ".join(out.err.split())
    assert not said.startswith("OK") and "may not do what you want" in said
    assert f"'{ENTITY}' calls a model but sets no api_url" in warned and DEFAULT_API_URL in warned
    assert nothing_answers == [DEFAULT_API_URL]


def test_check_config_names_the_composite_member_left_on_the_default(tmp_path, capsys, nothing_answers):
    block = {"members": ["ovos-memory-plugin-recency", {"module": ENTITY, "config": {"backend": "memory"}},
                         {"module": "ovos-memory-plugin-longterm", "config": {"backend": "memory"}}]}
    path = write(tmp_path / "b.json", block)
    assert main(["check-config", path, "--module", COMPOSITE]) == 0
    warned = " ".join(capsys.readouterr().err.split())
    assert f"members[1] '{ENTITY}' calls a model" in warned and "members[2] 'ovos-memory-plugin-longterm'" in warned
    assert nothing_answers == [DEFAULT_API_URL], "the default endpoint asked once per member"


def test_check_config_names_the_presets_member_left_on_the_default(tmp_path, capsys, nothing_answers):
    assert main(["check-config", write(tmp_path / "b.json", {"preset": "hybrid"}), "--module", COMPOSITE]) == 0
    out = capsys.readouterr()
    assert not out.out.startswith("OK") and f"the preset '{ENTITY}' calls a model" in " ".join(out.err.split())
    assert main(["check-config", write(tmp_path / "c.json", {"preset": "hybrid", "api_url": None}),
                 "--module", COMPOSITE]) == 0
    assert capsys.readouterr().out.startswith("OK")


def test_check_config_says_ok_when_the_model_was_turned_off(tmp_path, capsys, nothing_answers):
    path = write(tmp_path / "b.json", {"backend": "memory", "api_url": None})
    assert main(["check-config", path, "--module", ENTITY]) == 0
    assert capsys.readouterr().out.startswith("OK") and nothing_answers == []


def test_check_config_warns_when_the_chosen_endpoint_does_not_answer(tmp_path, capsys, nothing_answers):
    path = write(tmp_path / "b.json", {"backend": "memory", "api_url": "http://127.0.0.1:9/v1"})
    assert main(["check-config", path, "--module", ENTITY]) == 0  # a warning: the server may start later
    out = capsys.readouterr()
    assert not out.out.startswith("OK") and nothing_answers == ["http://127.0.0.1:9/v1"]
    assert "calls a model at http://127.0.0.1:9/v1, which does not answer now" in " ".join(out.err.split())


def test_check_config_warns_that_ovos_persona_does_not_lend_its_chat_endpoint(tmp_path, capsys, nothing_answers):
    # 'ovos-memory chat' gives the memory the handler's endpoint; ovos-persona gives it only its
    # block: there it would call the default, which does not answer.
    assert main(["check-config", persona_file(tmp_path, {"backend": "memory"})]) == 0
    out = capsys.readouterr()
    warned = " ".join(out.err.split())
    assert not out.out.startswith("OK")
    assert "ovos-persona gives a memory only its own block" in warned and "set api_url in the memory's block" in warned


def test_check_config_says_ok_when_the_default_endpoint_answers(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(check, "_answers", lambda url: True)
    path = write(tmp_path / "b.json", {"backend": "memory"})
    assert main(["check-config", path, "--module", ENTITY]) == 0
    assert capsys.readouterr().out.startswith("OK")
