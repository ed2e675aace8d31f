"""The RAM side of ``SqliteEmbeddingsDB``: a collection as a matrix of unit rows, and vector checks.

Kept apart from the SQLite side so each can be read alone: this module knows nothing of files or
transactions, only numpy rows, their keys and metadata, and the per-key indexes that make a
``where`` filter a vector compare.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import EmbeddingsError, MissingDependencyError

PLUGIN_NAME = "ovos-memory-sqlite-embeddings-plugin"
#: Metadata keys with a RAM index, so filtering on them costs a vector compare, not a loop.
INDEXED_KEYS = ("session_id",)


def numpy_module() -> Any:
    try:
        import numpy
    except ImportError as exc:  # pragma: no cover - numpy is in every extra that installs this
        raise MissingDependencyError(f"{PLUGIN_NAME} needs numpy: pip install 'ovos-memory-plugins[local-rag]'") \
            from exc
    return numpy


class Matrix:
    """The RAM mirror of one collection: unit rows, keys, metadata, and an index per key in
    ``INDEXED_KEYS``. Rows are unordered: a delete moves the last row into the hole."""

    def __init__(self, dim: int | None) -> None:
        np = numpy_module()
        self.dim = dim
        self.n = 0
        self.rows = np.zeros((0, dim or 0), dtype=np.float32)
        self.keys: list[str] = []
        self.meta: list[dict[str, Any] | None] = []
        self.pos: dict[str, int] = {}
        self.codes = {k: np.zeros(0, dtype=np.int64) for k in INDEXED_KEYS}
        self.values: dict[str, dict[Any, int]] = {k: {} for k in INDEXED_KEYS}
        self.version = -1   # the collection's version this mirror reflects; -1: never loaded
        self.epoch = -1
        self.max_id = 0

    def put(self, key: str, unit: Any, meta: dict[str, Any] | None) -> None:
        row = self.pos.get(key)
        if row is None:
            row = self.n
            self._grow(row + 1)
            self.n += 1
            self.keys.append(key)
            self.meta.append(None)
            self.pos[key] = row
        self.rows[row] = unit
        self.meta[row] = meta
        for name in INDEXED_KEYS:
            self.codes[name][row] = self._code(name, meta)

    def extend(self, keys: list[str], units: Any, metas: list[dict[str, Any] | None]) -> None:
        """Append rows for keys not in the mirror yet (a load: one copy, no per-row numpy calls)."""
        start, count = self.n, len(keys)
        self._grow(start + count)
        self.rows[start:start + count] = units
        self.keys.extend(keys)
        self.meta.extend(metas)
        self.pos.update(zip(keys, range(start, start + count)))
        for name in INDEXED_KEYS:
            self.codes[name][start:start + count] = [self._code(name, m) for m in metas]
        self.n += count

    def remove(self, key: str) -> None:
        row = self.pos.pop(key, None)
        if row is None:
            return
        last = self.n - 1
        if row != last:  # fill the hole with the last row: O(dim), no reshuffle
            self.rows[row] = self.rows[last]
            self.keys[row] = self.keys[last]
            self.meta[row] = self.meta[last]
            self.pos[self.keys[row]] = row
            for name in INDEXED_KEYS:
                self.codes[name][row] = self.codes[name][last]
        self.keys.pop()
        self.meta.pop()
        self.n = last

    def mask(self, where: Mapping[str, Any]) -> Any:
        """Boolean row mask for ``where`` (all pairs must match), or None for no filter."""
        np = numpy_module()
        mask = None
        for name, value in where.items():
            if name in self.codes:
                code = self.values[name].get(_hashable(value), -2)  # -2 matches no row
                part = self.codes[name][:self.n] == code
            else:  # not indexed: a Python pass over the metadata
                part = np.fromiter(((m or {}).get(name) == value for m in self.meta), dtype=bool, count=self.n)
            mask = part if mask is None else mask & part
        return mask

    def _code(self, name: str, meta: dict[str, Any] | None) -> int:
        if not meta or name not in meta:
            return -1
        value = _hashable(meta[name])
        table = self.values[name]
        if value not in table:
            table[value] = len(table)
        return table[value]

    def _grow(self, needed: int) -> None:
        np = numpy_module()
        if needed <= len(self.rows):
            return
        capacity = max(needed, 2 * len(self.rows), 64)  # doubling: appends are amortised O(dim)
        rows = np.zeros((capacity, self.dim or 0), dtype=np.float32)
        rows[:self.n] = self.rows[:self.n]
        self.rows = rows
        for name in INDEXED_KEYS:
            codes = np.full(capacity, -1, dtype=np.int64)
            codes[:self.n] = self.codes[name][:self.n]
            self.codes[name] = codes


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return json.dumps(value, sort_keys=True, default=str)


def as_vector(value: Any) -> Any:
    np = numpy_module()
    vector = np.asarray(value, dtype=np.float32)
    if vector.ndim == 2 and vector.shape[0] == 1:
        vector = vector[0]
    if vector.ndim != 1 or vector.shape[0] == 0:
        raise EmbeddingsError(f"{PLUGIN_NAME}: an embedding must be a non-empty 1-D vector, got shape {vector.shape}")
    if not np.isfinite(vector).all():
        raise EmbeddingsError(f"{PLUGIN_NAME}: the embedding holds NaN or infinite values")
    return vector


def unit_rows(matrix: Any) -> Any:
    np = numpy_module()
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, np.float32(1e-12))
