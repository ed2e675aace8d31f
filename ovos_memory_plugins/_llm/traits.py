"""What an endpoint has shown about itself, learnt once per (api_url, model) and shared.

Every client of one endpoint (the entity and longterm memories of one persona, say) reads and
updates the same :class:`Traits`, so a fact is learnt once per process:

* **structured output**: which ``response_format`` the server honours. Servers differ: OpenAI,
  llama.cpp's llama-server, vLLM and Ollama accept ``{"type": "json_schema", ...}``;
  llama-cpp-python's server answers that with HTTP 500 but takes
  ``{"type": "json_object", "schema": ...}``; older servers take only ``{"type": "json_object"}``
  or nothing. Modes are tried best first; a rejection steps down at once and is not an outage;
  a mode whose replies ignore the schema twice in a row before it was ever confirmed steps down
  too (some servers drop unknown keys silently). A confirmed mode stays: a weak model failing
  once under a real grammar is no proof of anything.
* **context size**: from ``max_prompt_tokens`` in the config, else what the server says (llama.cpp's
  ``/props``, vLLM's ``max_model_len``), else what a "maximum context length is N tokens" error
  said, else :data:`DEFAULT_CONTEXT`.
* **token ratio**: the server's ``usage.prompt_tokens`` over our estimate, averaged, so budgets
  follow the model's real tokenizer.
"""
from __future__ import annotations

import dataclasses
import re
import threading
from typing import Any

__all__ = ["DEFAULT_CONTEXT", "MODES", "Traits", "is_rejection", "overflow_limit", "response_format", "satisfies",
           "traits_for"]

#: Response-format modes, best first; "none" sends no response_format (prompt + tolerant parser).
MODES = ("json_schema", "json_object+schema", "json_object", "none")
#: The context assumed when nothing tells it: llama.cpp's long-standing default, safe for small models.
DEFAULT_CONTEXT = 2048
#: Replies ignoring the schema, in a row, before an unconfirmed mode is given up.
MAX_STRIKES = 2

# A refusal of the request's shape, as servers word it (a 500 from pydantic's validation in
# llama-cpp-python, a 400/422 elsewhere).
_REJECTION = re.compile(r"response_format|json_schema|literal_error|input should be|unrecognized|unknown field|"
                        r"not supported|unsupported|extra_forbidden|extra inputs|validation", re.IGNORECASE)
# A chat template that may have no system role (Gemma's: a jinja error, HTTP 500 from
# llama-cpp-python, 400 from vLLM, 422 from TGI; OpenAI's o1-mini; a validation error naming the
# roles it takes), or wants the roles to alternate. Only a hint: the client learns it only when the
# request without a system message then succeeds.
_NO_SYSTEM_ROLE = re.compile(r"system role|system messages? (?:is |are )?not|roles must alternate|"
                             r"only (?:the )?user and assistant roles|does not support '?system|"
                             r"role '?system'? is not supported|input should be 'user' or 'assistant'",
                             re.IGNORECASE)
_OVERFLOW = re.compile(r"context_length_exceeded|maximum context length|exceeds? the (?:available )?context|"
                       r"context (?:size|window|length) (?:has been )?exceeded|too many tokens", re.IGNORECASE)
_LIMIT = (re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
          re.compile(r"context (?:window|size|length) of (\d+)", re.IGNORECASE),
          re.compile(r"\"n_ctx\"\s*:\s*(\d+)"))


@dataclasses.dataclass
class Traits:
    """One endpoint's learnt facts; read and written under :attr:`lock`."""

    mode_index: int = 0
    confirmed: bool = False
    strikes: int = 0
    context: int | None = None
    context_source: str = ""
    probed: bool = False
    ratio: float = 1.0
    #: False once the server refused a system message: it goes at the head of the first user turn.
    system_role: bool = True
    #: True once the model reasoned before answering: it is asked not to (client.NO_THINK).
    thinks: bool = False
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def mode(self) -> str:
        return MODES[self.mode_index]

    def rejected(self, mode: str) -> str:
        """The server refused ``mode``: step down (or start over if it was confirmed). The next mode."""
        with self.lock:
            if mode == self.mode:
                if self.confirmed:  # the server was replaced by one that refuses it: detect again
                    self.mode_index, self.confirmed = 0, False
                else:
                    self.mode_index = min(self.mode_index + 1, len(MODES) - 1)
                self.strikes = 0
            return self.mode

    def answered(self, mode: str, follows_schema: bool) -> None:
        """A 200 reply in ``mode``: confirm it, or count a strike against an unconfirmed one."""
        with self.lock:
            if mode != self.mode or mode == "none":
                return
            if follows_schema:
                self.confirmed, self.strikes = True, 0
            elif not self.confirmed:
                self.strikes += 1
                if self.strikes >= MAX_STRIKES:
                    self.mode_index = min(self.mode_index + 1, len(MODES) - 1)
                    self.strikes = 0

    def learn_context(self, tokens: int, source: str) -> None:
        with self.lock:
            if tokens > 0 and (self.context is None or source == "error"):
                self.context, self.context_source = int(tokens), source

    def observe_prompt(self, estimated: int, real: int | None) -> None:
        """Follow the real tokenizer: ``real / estimated``, clamped and averaged."""
        if not real or estimated <= 0:
            return
        with self.lock:
            self.ratio = 0.7 * self.ratio + 0.3 * max(0.7, min(1.5, real / estimated))


_registry: dict[tuple[str, str], Traits] = {}
_registry_lock = threading.Lock()


def traits_for(api_url: str, model: str) -> Traits:
    """The shared traits of this endpoint and model."""
    key = (api_url.rstrip("/"), model or "")
    with _registry_lock:
        traits = _registry.get(key)
        if traits is None:
            if len(_registry) > 256:
                _registry.clear()
            traits = _registry[key] = Traits()
        return traits


def response_format(mode: str, schema: dict[str, Any] | None, name: str = "reply") -> dict[str, Any] | None:
    """The ``response_format`` of ``mode`` (None for "none")."""
    if mode == "json_schema" and schema is not None:
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    if mode == "json_object+schema" and schema is not None:
        return {"type": "json_object", "schema": schema}
    if mode in ("json_object", "json_schema", "json_object+schema"):
        return {"type": "json_object"}
    return None


def satisfies(reply: str, schema: dict[str, Any] | None) -> bool:
    """Whether ``reply`` is a JSON object with the schema's top-level required keys (cheap check)."""
    import json

    try:
        data = json.loads(reply)
    except ValueError:
        return False
    if schema is None or schema.get("type") != "object":
        return True
    return isinstance(data, dict) and all(k in data for k in schema.get("required", ()))


def refuses_system_role(status: int, detail: str) -> bool:
    """Whether an HTTP error says the model's chat template takes no system message."""
    return status in (400, 422, 500) and bool(_NO_SYSTEM_ROLE.search(detail))


def without_system_role(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` for a template without a system role: the system text opens the first user
    message (as llama.cpp's own Gemma template does), or is one before the first reply, so the
    roles alternate from a user message as before."""
    system = "\n\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    rest = [dict(m) for m in messages if m.get("role") != "system"]
    if not system.strip():
        return rest
    if not rest or rest[0].get("role") != "user":
        return [{"role": "user", "content": system}, *rest]
    content = rest[0].get("content")
    if isinstance(content, list):  # content parts: the instructions as a text part before them
        rest[0]["content"] = [{"type": "text", "text": system}, *content]
    else:
        rest[0]["content"] = f"{system}\n\n{content or ''}"
    return rest


def _text(content: Any) -> str:
    """A message's text, whether a string or content parts."""
    if isinstance(content, list):
        return "\n".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return str(content or "")


def is_rejection(status: int, detail: str) -> bool:
    """Whether an HTTP error refuses the request's shape (not the server failing, not an overflow)."""
    if overflow_limit(status, detail) is not None or refuses_system_role(status, detail):
        return False
    return status in (400, 404, 422) or (status == 500 and bool(_REJECTION.search(detail)))


def overflow_limit(status: int, detail: str) -> int | None:
    """For a "prompt longer than the context" error: the context size it names (0 if none); else None."""
    if status not in (400, 413, 500) or not _OVERFLOW.search(detail):
        return None
    for pattern in _LIMIT:
        found = pattern.search(detail)
        if found:
            return int(found.group(1))
    return 0
