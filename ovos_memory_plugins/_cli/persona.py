"""A persona JSON file and its memory, wired exactly as ovos-persona wires them.

* ``memory_module`` absent: the persona default, ``ovos-agents-short-term-memory-plugin``.
  When ovos-persona is not installed, our ``ovos-memory-plugin-short-term`` stands in for it.
* ``memory_module`` falsy (JSON ``null``, ``""``, ``false``): no memory and no lookups at all.
* configured but not installed: memory is disabled with ONE warning, the plugin is looked up
  again on later turns (after 1 s, doubling up to 60 s), and adopted when it appears; the
  back-off resets on adoption. Concurrent turns build at most one instance, and a slow
  constructor never blocks another turn (that turn is answered without memory).
* the plugin's config is the persona's block keyed by the plugin name.
* one ``update_history([USER, ASSISTANT])`` per exchange.

Example::

    persona = load_persona("~/.config/ovos_persona/assistant.json")
    slot = MemorySlot(persona.memory_module, persona.memory_config)
    messages = slot.context("what is my dog called?", "kitchen")
    slot.remember("what is my dog called?", "Biscuit.", "kitchen")
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.compat import AgentMessage, MessageRole
from .._core.loading import MEMORY_GROUP, installed_plugins, load_memory_class
from .._core.log import LOG
from ..errors import ConfigError, MemoryPluginError

__all__ = [
    "OUR_SHORT_TERM",
    "PERSONA_DEFAULT_MEMORY",
    "MemorySlot",
    "Persona",
    "PersonaError",
    "load_persona",
    "memory_class",
    "parse_persona",
    "persona_endpoint",
]

#: What ovos-persona uses when ``memory_module`` is absent.
PERSONA_DEFAULT_MEMORY = "ovos-agents-short-term-memory-plugin"
#: Our drop-in for it (used when ovos-persona's own plugin is not installed).
OUR_SHORT_TERM = "ovos-memory-plugin-short-term"
#: Late adoption: first retry after this many seconds, doubling up to the maximum.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0

_ABSENT = object()


class PersonaError(MemoryPluginError, ValueError):
    """The persona file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Persona:
    """A parsed persona file.

    Attributes:
        memory_module: the memory plugin's entry-point name, or None when memory is disabled.
        memory_config: the block keyed by that name (a copy; ``{}`` when absent).
        handlers: ``handlers`` (or the legacy ``solvers``), in order.
    """

    name: str
    data: Mapping[str, Any]
    handlers: tuple[str, ...]
    memory_module: str | None
    memory_config: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""

    def handler_block(self, name: str) -> dict[str, Any]:
        block = self.data.get(name)
        return dict(block) if isinstance(block, Mapping) else {}


def load_persona(path: str | os.PathLike[str]) -> Persona:
    """Read and check a persona JSON file; :class:`PersonaError` names what is wrong."""
    file = Path(os.path.expanduser(str(path)))
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PersonaError(f"persona file {str(file)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PersonaError(f"cannot read persona file {str(file)!r}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PersonaError(f"persona file {str(file)!r} is not valid JSON: {exc}") from None
    except RecursionError:
        raise PersonaError(f"persona file {str(file)!r} is nested too deeply to read") from None
    return parse_persona(data, default_name=file.stem, path=str(file))


def persona_endpoint(persona: Persona) -> dict[str, str] | None:
    """The persona's chat endpoint as the LLM memories take it (handler, api_url, model, api_key),
    or None when no OpenAI-compatible handler names an ``api_url``."""
    from .engine import find_endpoint

    found = find_endpoint(persona.handlers, persona.data)
    if found is None or not found[1].get("api_url"):
        return None
    name, block = found
    return {"handler": name, "api_url": str(block["api_url"]), "model": str(block.get("model") or ""),
            "api_key": str(block.get("key") or block.get("api_key") or "")}


def parse_persona(data: Any, default_name: str = "persona", path: str = "") -> Persona:
    """A :class:`Persona` from an already decoded persona dict (an ``opm.persona`` entry, say)."""
    where = repr(path) if path else "persona"
    if not isinstance(data, Mapping):
        raise PersonaError(f"{where} must hold a JSON object, not {type(data).__name__}")
    handlers = data.get("handlers") or data.get("solvers") or []
    if isinstance(handlers, str):
        handlers = [handlers]
    if not isinstance(handlers, list) or not all(isinstance(h, str) and h for h in handlers):
        raise PersonaError(f"{where}: 'handlers' must be a list of plugin names")
    if not handlers:
        raise PersonaError(f"{where}: personas must have at least 1 utterance handler ('handlers')")
    module = data.get("memory_module", _ABSENT)
    if module is _ABSENT:
        module = PERSONA_DEFAULT_MEMORY
    elif not module:
        module = None  # null / "" / false: memory disabled, as ovos-persona
    elif not isinstance(module, str):
        raise PersonaError(f"{where}: 'memory_module' must be a plugin name or null, not {module!r}")
    block = data.get(module) if module else None
    if block is not None and not isinstance(block, Mapping):
        raise PersonaError(f"{where}: the '{module}' block must be a JSON object")
    name = data.get("name") or default_name
    return Persona(str(name), dict(data), tuple(handlers), module, dict(block or {}), path)


def memory_class(module: str, loader: Callable[[str], type | None] = load_memory_class) -> type | None:
    """The class for ``module``; ovos-persona's default name falls back to our short-term memory."""
    if module == PERSONA_DEFAULT_MEMORY and loader is load_memory_class and \
            module not in installed_plugins(MEMORY_GROUP):
        return loader(OUR_SHORT_TERM)  # not asked of the plugin manager, which would warn of it each time
    cls = loader(module)
    if cls is None and module == PERSONA_DEFAULT_MEMORY:
        cls = loader(OUR_SHORT_TERM)
    return cls


class MemorySlot:
    """A persona's memory, looked up as ovos-persona does, with late adoption; see the module doc.

    Args:
        module: the entry-point name, or None for "no memory".
        config: the plugin's block (passed as ``config=``).
        loader: ``name -> class or None`` (tests inject one).
        clock: a monotonic clock (tests inject one).
        strict: True raises the constructor's error at once (a CLI should fail loudly on a
            broken config, as a persona fails to load); False treats it like a missing plugin.
        endpoint: the persona's chat endpoint (:func:`persona_endpoint`), for the memories that
            call a model and name no ``api_url`` of their own.
    """

    def __init__(self, module: str | None, config: Mapping[str, Any] | None = None,
                 loader: Callable[[str], type | None] = load_memory_class,
                 clock: Callable[[], float] = time.monotonic, strict: bool = True,
                 endpoint: Mapping[str, str] | None = None):
        self.module = module or None
        self.config = dict(config or {})
        self.endpoint = dict(endpoint) if endpoint else None
        self._loader = loader
        self._clock = clock
        self._lock = threading.Lock()
        self._memory: Any = None
        self._building = False
        self._delay = RETRY_FIRST_S
        self._next_try = 0.0
        self._warned = False
        #: How many lookups were made (tests read it).
        self.lookups = 0
        if self.module:
            self._try_adopt(strict=strict)

    @property
    def memory(self) -> Any:
        """The memory instance, or None (disabled, or not available yet)."""
        return self._memory

    @property
    def enabled(self) -> bool:
        return self.module is not None

    def get(self) -> Any:
        """The memory, adopting it if it became available and a lookup is due."""
        if self._memory is not None or self.module is None:
            return self._memory
        with self._lock:
            due = not self._building and self._clock() >= self._next_try
        if due:
            self._try_adopt(strict=False)
        return self._memory

    def _config_for(self, cls: type) -> dict[str, Any]:
        """The block, with the persona's chat endpoint for a memory of ours that calls a model (it
        uses it when the block names no ``api_url``)."""
        from .._core.loading import reads_key
        from .._llm.endpoint import PERSONA_ENDPOINT_KEY

        config = dict(self.config)
        if self.endpoint and reads_key(cls, "api_url", third_party=False):
            config[PERSONA_ENDPOINT_KEY] = dict(self.endpoint)
        return config

    def _try_adopt(self, strict: bool) -> None:
        with self._lock:
            if self._memory is not None or self._building:
                return
            self._building = True  # other turns go on without memory meanwhile
        memory = None
        try:
            self.lookups += 1
            cls = memory_class(self.module or "", self._loader)
            if cls is not None:
                try:
                    memory = cls(config=self._config_for(cls))
                except Exception as exc:  # noqa: BLE001 - a late plugin may fail like any other
                    if strict:
                        raise
                    LOG.warning(f"memory plugin '{self.module}' failed to start ({exc}); will retry")
        finally:
            with self._lock:
                self._building = False
                if memory is not None:
                    self._memory = memory
                    self._delay = RETRY_FIRST_S  # reset: a later outage starts from the first delay
                    self._next_try = 0.0
                else:
                    self._next_try = self._clock() + self._delay
                    self._delay = min(RETRY_MAX_S, self._delay * 2)
        if memory is not None:
            if self._warned:
                LOG.info(f"memory plugin '{self.module}' is available now; memory enabled")
        elif not self._warned:
            self._warned = True
            LOG.warning(f"memory plugin '{self.module}' not available; short-term memory disabled")

    # -- what a persona does per turn ------------------------------------------------------
    def context(self, utterance: str, session_id: str) -> list[AgentMessage]:
        """The messages for the chat engine: the memory's context, or just the utterance."""
        memory = self.get()
        if memory is None:
            return [AgentMessage(MessageRole.USER, utterance)]
        return list(memory.build_conversation_context(utterance, session_id))

    def remember(self, utterance: str, answer: str, session_id: str) -> bool:
        """Record one whole exchange; False when there is no memory (or nothing to record)."""
        memory = self.get()
        if memory is None or not answer.strip():
            return False
        memory.update_history([AgentMessage(MessageRole.USER, utterance),
                               AgentMessage(MessageRole.ASSISTANT, answer)], session_id)
        return True

    def close(self) -> None:
        memory, self._memory = self._memory, None
        if memory is not None and callable(getattr(memory, "close", None)):
            memory.close()


def open_memory(module: str, config: Mapping[str, Any] | None = None) -> Any:
    """A memory instance for management commands; :class:`ConfigError` if it cannot be built."""
    cls = memory_class(module)
    if cls is None:
        from .._core.loading import did_you_mean

        raise ConfigError(f"memory plugin '{module}' is not installed{did_you_mean(module)}")
    from .._memory.waiting import no_waiting

    with no_waiting():  # a command on a store that does not answer says so, it does not wait
        return cls(config=dict(config or {}))
