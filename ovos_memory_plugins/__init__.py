"""ovos-memory-plugins: conversational memory for OpenVoiceOS personas.

Each backend is an ``AgentContextManager`` (ovos-plugin-manager) registered under the
``opm.agents.memory`` entry-point group. Classes are imported lazily, so ``import
ovos_memory_plugins`` never loads an optional dependency.
"""
from __future__ import annotations

import importlib
from typing import Any

# Above the reference (1.2.3a1) we replace: a persona or package requiring
# "ovos-memory-plugins>=1.2" accepts this drop-in.
__version__ = "1.3.0"

_EXPORTS = {
    "BaseRetrievalMemory": "ovos_memory_plugins.retrieval",
    "BasicShortTermMemory": "ovos_memory_plugins.short_term",
    "CompositeMemory": "ovos_memory_plugins.composite",
    "EntityMemory": "ovos_memory_plugins.entity",
    "LexicalMemory": "ovos_memory_plugins.lexical",
    "LocalRAGMemory": "ovos_memory_plugins.local_rag",
    "LongTermMemory": "ovos_memory_plugins.longterm",
    "MemoryHit": "ovos_memory_plugins.retrieval",
    "RecencyMemory": "ovos_memory_plugins.recency",
    "RedisMemory": "ovos_memory_plugins.redis_memory",
}

__all__ = sorted([*_EXPORTS, "__version__"], key=str.casefold)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ovos_memory_plugins' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
