"""Our plugins loaded by the real ovos-persona (PyPI pre-release) from a persona JSON.

ovos-persona 0.9.0a35 needs the pre-release ovos-plugin-manager, so this module runs only in
the pre-release environment::

    pip install --pre ovos-persona
    pytest -m persona tests/test_persona_integration.py

Everywhere else it must be deselected explicitly (``pytest -m "not persona"``): it is not
skipped when ovos-persona is missing, it fails, so CI cannot lose it silently.

The persona's handler is the real ``ovos-chat-openai-plugin`` (installed with ovos-persona)
talking to a real HTTP server on 127.0.0.1; the flow is the one of
``PersonaService.handle_persona_query``: ``get_messages``, the completion, ``remember``.
The same persona JSON then drives ``ovos-memory chat``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ovos_memory_plugins.testing.llm import FakeLLMServer

pytestmark = pytest.mark.persona


@pytest.fixture(scope="module")
def ovos_persona():
    try:
        import ovos_persona
    except ImportError as exc:  # a failure, not a skip: deselect with -m "not persona" instead
        pytest.fail(f"ovos-persona is not installed ({exc}); run `pip install --pre ovos-persona` "
                    "in the pre-release venv, or deselect with -m 'not persona'")
    return ovos_persona


def answer_from_context(messages):
    """The model: answers from what the memory put in front of the question."""
    told = " ".join(m.get("content") or "" for m in messages[:-1])
    question = messages[-1]["content"].lower()
    if "dog" in question and "called" in question and "?" in question:
        return "Your dog is called Biscuit." if "Biscuit" in told else "I don't know."
    if "where do i live" in question:
        return "You live in Porto." if "Porto" in told else "I don't know."
    return "Noted."


def persona_config(llm_url, tmp_path):
    return {
        "name": "Rememberer",
        "handlers": ["ovos-chat-openai-plugin"],
        "ovos-chat-openai-plugin": {"api_url": llm_url, "key": "sk-test", "model": "fake-model",
                                    "allow_system_prompts": True},
        "memory_module": "ovos-memory-plugin-composite",
        "ovos-memory-plugin-composite": {
            "scope": "global",
            "system_prompt": "You are a helpful assistant.",
            "members": [
                {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "window.db")}},
                {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "lexical.db")}},
            ],
        },
    }


def turn(persona, utterance, session):
    """What PersonaService.handle_persona_query does for one utterance (without the bus)."""
    messages = persona.get_messages(utterance, session)
    answer = persona.chat(messages, session)
    persona.remember(utterance, answer, session)
    return answer


def test_the_real_persona_loads_our_plugin_from_a_persona_json_and_remembers(ovos_persona, tmp_path):
    from ovos_bus_client.session import Session

    from ovos_memory_plugins.composite import CompositeMemory

    with FakeLLMServer(reply=answer_from_context) as llm:
        config = persona_config(llm.url, tmp_path)
        persona = ovos_persona.Persona(config["name"], json.loads(json.dumps(config)))
        assert isinstance(persona.memory, CompositeMemory)
        assert [m.module for m in persona.memory.members] == ["ovos-memory-plugin-recency",
                                                              "ovos-memory-plugin-lexical"]
        kitchen = Session("kitchen")
        assert turn(persona, "my dog is called Biscuit", kitchen) == "Noted."
        assert turn(persona, "what is my dog called?", kitchen) == "Your dog is called Biscuit."
        sent = llm.chat_requests()[-1].messages
        assert sent[0] == {"role": "system", "content": "You are a helpful assistant."}
        assert sent[-1] == {"role": "user", "content": "what is my dog called?"}
        persona.memory.close()

        # a restart: a new Persona from the same JSON, in another session
        again = ovos_persona.Persona(config["name"], json.loads(json.dumps(config)))
        bedroom = Session("bedroom")
        assert turn(again, "what is my dog called?", bedroom) == "Your dog is called Biscuit."
        assert turn(again, "what is my dog called?", kitchen) == "Your dog is called Biscuit."
        window = again.memory.get_history("kitchen")
        assert [m.content for m in window][:4] == ["my dog is called Biscuit", "Noted.", "what is my dog called?",
                                                   "Your dog is called Biscuit."]
        again.memory.close()


def test_each_session_is_recorded_against_its_persona(ovos_persona, tmp_path):
    from ovos_bus_client.session import Session

    with FakeLLMServer(reply=answer_from_context) as llm:
        one = persona_config(llm.url, tmp_path / "one")
        two = persona_config(llm.url, tmp_path / "two")
        first = ovos_persona.Persona("one", one)
        second = ovos_persona.Persona("two", two)
        turn(first, "I live in Porto", Session("a"))
        assert turn(second, "where do I live?", Session("b")) == "I don't know."
        assert turn(first, "where do I live?", Session("c")) == "You live in Porto."
        assert first.memory.sessions() == ["a", "c"] and second.memory.sessions() == ["b"]
        first.memory.close()
        second.memory.close()


def test_a_persona_without_memory_module_gets_a_short_term_memory(ovos_persona, tmp_path):
    with FakeLLMServer() as llm:
        config = persona_config(llm.url, tmp_path)
        del config["memory_module"]
        persona = ovos_persona.Persona("default", config)
        assert type(persona.memory).__name__ == "BasicShortTermMemory"


def test_our_short_term_memory_is_a_drop_in_for_the_persona_default(ovos_persona):
    from ovos_bus_client.session import Session

    with FakeLLMServer(reply=answer_from_context) as llm:
        config = {"handlers": ["ovos-chat-openai-plugin"],
                  "ovos-chat-openai-plugin": {"api_url": llm.url, "model": "m", "allow_system_prompts": True},
                  "memory_module": "ovos-memory-plugin-short-term",
                  "ovos-memory-plugin-short-term": {"max_history": 4}}
        persona = ovos_persona.Persona("short", config)
        sess = Session("s")
        turn(persona, "my dog is called Biscuit", sess)
        assert turn(persona, "what is my dog called?", sess) == "Your dog is called Biscuit."
        assert len(persona.memory.get_history("s")) == 4


def test_the_same_persona_json_drives_ovos_memory_chat(ovos_persona, tmp_path):
    with FakeLLMServer(reply=answer_from_context) as llm:
        path = tmp_path / "persona.json"
        path.write_text(json.dumps(persona_config(llm.url, tmp_path)))
        run = [sys.executable, "-m", "ovos_memory_plugins", "chat", "--persona", str(path), "--session", "kitchen"]
        first = subprocess.run(run, input="my dog is called Biscuit\n", text=True, capture_output=True, timeout=60,
                               env=dict(os.environ))
        second = subprocess.run(run, input="what is my dog called?\n", text=True, capture_output=True, timeout=60,
                                env=dict(os.environ))
        # and the real persona reads what the command recorded
        from ovos_bus_client.session import Session

        persona = ovos_persona.Persona("Rememberer", persona_config(llm.url, tmp_path))
        answer = turn(persona, "what is my dog called?", Session("elsewhere"))
        persona.memory.close()
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert second.stdout.strip() == "Your dog is called Biscuit."
    assert answer == "Your dog is called Biscuit."
