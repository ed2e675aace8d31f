"""The reference package's import path for the retrieval base class."""
from __future__ import annotations

from .common import MemoryHit
from .retrieval import BaseRetrievalMemory

__all__ = ["BaseRetrievalMemory", "MemoryHit"]
