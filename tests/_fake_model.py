"""A scripted model for FakeLLMServer that answers the memories' two kinds of request: a fact
extraction (``{"facts": [...]}`` for the user's messages in it) and a narrative of some turns."""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ovos_memory_plugins._llm.facts.extraction import SYSTEM_PROMPT as EXTRACTION_PROMPT
from ovos_memory_plugins._llm.summaries.fold import NARRATIVE_PROMPT

Item = Sequence[Any]  # (attribute, value) or (attribute, value, negated)


def items(*facts: Item) -> str:
    """An extraction reply holding these (attribute, value[, negated]) items."""
    return json.dumps({"facts": [{"attribute": f[0], "value": f[1], "negated": f[2] if len(f) > 2 else False}
                                 for f in facts]})


def said_in(messages: list[dict[str, Any]]) -> list[str]:
    """The user lines a narrative request holds."""
    return [line.removeprefix("user: ") for line in str(messages[-1]["content"]).splitlines()
            if line.startswith("user: ")]


def users_in(messages: list[dict[str, Any]]) -> list[str]:
    """The user's messages an extraction request holds."""
    return [line.removeprefix("User: ") for line in str(messages[-1]["content"]).splitlines()
            if line.startswith("User: ")]


def echo_narrative(messages: list[dict[str, Any]]) -> str:
    return "The user talked about this: " + " ".join(said_in(messages))


def is_extraction(messages: list[dict[str, Any]]) -> bool:
    return bool(messages) and messages[0].get("content") == EXTRACTION_PROMPT


def is_narrative(messages: list[dict[str, Any]]) -> bool:
    return bool(messages) and messages[0].get("content") == NARRATIVE_PROMPT


def memory_model(facts: Mapping[str, Sequence[Item]] | None = None,
                 narrative: str | Callable[[list[dict[str, Any]]], str] = echo_narrative) -> Callable[..., str]:
    """A ``reply`` for FakeLLMServer: ``facts`` by utterance for extractions, ``narrative`` for the rest."""
    def reply(messages: list[dict[str, Any]]) -> str:
        if is_extraction(messages):
            return items(*(item for said in users_in(messages) for item in (facts or {}).get(said, ())))
        if is_narrative(messages):
            return narrative(messages) if callable(narrative) else narrative
        return "OK"
    return reply
