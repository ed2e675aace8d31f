"""What this package's two vector stores (SQLite, PostgreSQL) share of the OVOS ``EmbeddingsDB`` surface:
the single-key calls, made of the batch ones, and the checks of a batch's arguments."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from .vector_matrix import as_vector, numpy_module

__all__ = ["Batch", "SingleKeyCalls", "check_key", "check_meta", "check_name", "checked_batch", "dump_metadata",
           "load_metadata"]


def check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"embedding key must be a str, not {type(key).__name__}")
    return key


def check_meta(meta: Any) -> dict[str, Any] | None:
    from collections.abc import Mapping

    if meta is not None and not isinstance(meta, Mapping):
        raise TypeError(f"metadata must be a dict, not {type(meta).__name__}")
    return dict(meta) if meta else None


def check_name(name: Any) -> str:
    """A collection name: a non-empty str."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"collection name must be a non-empty str, not {name!r}")
    return name


def dump_metadata(meta: dict[str, Any] | None) -> str | None:
    """A collection's or an embedding's metadata as stored (JSON; None when empty)."""
    if not meta:
        return None
    try:
        return json.dumps(meta, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metadata must be JSON-serialisable: {exc}") from exc


def load_metadata(text: str | None) -> dict[str, Any]:
    """Stored metadata read back (``{}`` for none)."""
    return json.loads(text) if text else {}


class Batch(NamedTuple):
    """A checked ``add_embeddings_batch``: keys, float32 rows, metadata, and the positions to
    write (a key given twice keeps its last occurrence, as separate calls would)."""

    keys: list[str]
    vectors: Any
    metas: list[dict[str, Any] | None]
    order: list[int]


def checked_batch(keys: Sequence[str], embeddings: Sequence[Any],
                  metadata: Sequence[dict[str, Any] | None] | None) -> Batch | None:
    """The batch, checked (TypeError/ValueError naming the problem); None when it is empty."""
    keys = [check_key(k) for k in keys]
    if len(embeddings) != len(keys) or (metadata is not None and len(metadata) != len(keys)):
        raise ValueError("keys, embeddings and metadata must have the same length")
    if not keys:
        return None
    vectors = numpy_module().stack([as_vector(e) for e in embeddings])
    metas = [check_meta(m) for m in (metadata if metadata is not None else [None] * len(keys))]
    last = {k: i for i, k in enumerate(keys)}
    return Batch(keys, vectors, metas, sorted(last.values()))


class SingleKeyCalls:
    """``add_embeddings``, ``delete_embeddings`` and ``get_embeddings`` as one-key batches."""

    def add_embeddings_batch(self, keys: Sequence[str], embeddings: Sequence[Any],
                             metadata: Sequence[dict[str, Any] | None] | None = None,
                             collection_name: str | None = None) -> None:
        raise NotImplementedError

    def delete_embeddings_batch(self, keys: Sequence[str], collection_name: str | None = None) -> None:
        raise NotImplementedError

    def get_embeddings_batch(self, keys: Sequence[str], collection_name: str | None = None,
                             return_metadata: bool = False) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def add_embeddings(self, key: str, embedding: Any, metadata: dict[str, Any] | None = None,
                       collection_name: str | None = None) -> Any:
        """Store (or replace) ``key``; returns the stored float32 vector."""
        self.add_embeddings_batch([key], [embedding], [metadata], collection_name)
        return as_vector(embedding)

    def delete_embeddings(self, key: str, collection_name: str | None = None) -> None:
        self.delete_embeddings_batch([key], collection_name)

    def get_embeddings(self, key: str, collection_name: str | None = None, return_metadata: bool = False) -> Any:
        """The stored vector (as given, not normalised), or None; with metadata: (vector, metadata)."""
        (_, vector, meta), = self.get_embeddings_batch([key], collection_name, return_metadata=True)
        if return_metadata:
            return (vector, meta) if vector is not None else (None, None)
        return vector
