"""``MemoryHit`` and the fusion functions, at the reference package's import path and names."""
from __future__ import annotations

import dataclasses
from typing import Any

__all__ = [
    "fuse",
    "fuse_interleave",
    "fuse_merge",
    "fuse_priority",
    "fuse_rrf",
    "fuse_weighted",
    "FUSION_MODES",
    "interleave",
    "MemoryHit",
    "merge",
    "priority",
    "RankedLists",
    "rrf",
    "weighted",
]


@dataclasses.dataclass
class MemoryHit:
    """One recalled item.

    Attributes:
        content: the recalled text (for exchanges, ``"Q: ...\\nA: ..."``).
        source: the document id it came from (``"<session_id>_<n>"``), or "".
        score: the retriever's native score (higher is better; scales differ per retriever).
        metadata: ``session_id``, ``ts``; ``retriever`` and ``fusion_score`` when fused.
    """

    content: str
    source: str = ""
    score: float = 0.0
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


from .fusion import (  # noqa: E402 - fusion's functions return MemoryHit copies: it comes first
    FUSION_MODES,
    RankedLists,
    fuse,
    fuse_interleave,
    fuse_merge,
    fuse_priority,
    fuse_rrf,
    fuse_weighted,
    interleave,
    merge,
    priority,
    rrf,
    weighted,
)
