"""``SqliteEmbeddingsDB``: an OVOS ``EmbeddingsDB`` plugin in one SQLite file, exact top-k in numpy.

Entry point ``ovos-memory-sqlite-embeddings-plugin`` (group ``opm.embeddings``), the default
vector store of ``local-rag``. Vectors are float32 blobs and metadata JSON, in two tables of one
SQLite file (WAL; several processes may share it). Each collection is mirrored in RAM as a
matrix of unit rows, so a query is one matrix-vector product plus a partial sort: exact cosine
top-k, no approximate index to build or tune. For the few thousand to a few hundred thousand
memories a voice assistant gathers, that is faster than an ANN index and never misses.

The RAM copy is updated in place by this instance's writes (append, swap-delete) and kept in
step with other processes through two counters per collection: ``version`` (any write) and
``epoch`` (a delete or a replaced key). When another writer only appended, just the new rows
are read; otherwise the collection is reloaded.

``query(..., where={"session_id": sid})`` filters before ranking, so a session-scoped search
returns up to ``top_k`` hits of that session however many other sessions hold.

Example::

    >>> db = SqliteEmbeddingsDB({"path": ":memory:"})
    >>> db.add_embeddings("a", [1.0, 0.0], {"session_id": "s1"})
    array([1., 0.], dtype=float32)
    >>> db.add_embeddings("b", [0.0, 1.0], {"session_id": "s2"})
    array([0., 1.], dtype=float32)
    >>> [(key, round(distance, 3)) for key, distance in db.query([1.0, 0.1], top_k=1)]
    [('a', 0.005)]
    >>> [key for key, _ in db.query([1.0, 0.1], where={"session_id": "s2"})]
    ['b']
"""
from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ovos_plugin_manager.templates.embeddings import EmbeddingsDB

from ._core.log import LogOnce
from ._core.paths import default_path
from ._index.vector_calls import SingleKeyCalls, check_key, check_name, checked_batch, dump_metadata, load_metadata
from ._index.vector_matrix import PLUGIN_NAME, Matrix, as_vector, numpy_module, unit_rows
from .config import option, parse_config
from .errors import EmbeddingsError
from .storage.sqlite import Database, open_database, release_database

__all__ = ["Collection", "CollectionNotFound", "SqliteEmbeddingsConfig", "SqliteEmbeddingsDB"]

DEFAULT_FILE = "embeddings.db"
#: Keys per ``IN (...)`` list (SQLite's default limit on variables is 999 on old builds).
_CHUNK = 500

_MIGRATIONS = (
    """
    CREATE TABLE IF NOT EXISTS ovos_vec_collections (
        name TEXT PRIMARY KEY,
        metadata TEXT NOT NULL DEFAULT '{}',   -- JSON
        dim INTEGER,                           -- fixed by the first vector; NULL while empty
        version INTEGER NOT NULL DEFAULT 0,    -- +1 per write: readers see another process's writes
        epoch INTEGER NOT NULL DEFAULT 0       -- +1 per delete or replaced key: forces a full reload
    );
    CREATE TABLE IF NOT EXISTS ovos_vec_items (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- grows only, so "rows after id N" finds appends
        collection TEXT NOT NULL REFERENCES ovos_vec_collections (name) ON DELETE CASCADE,
        key TEXT NOT NULL,
        vector BLOB NOT NULL,                  -- float32, little-endian, as given (not normalised)
        metadata TEXT,                         -- JSON, or NULL
        UNIQUE (collection, key)
    );
    """,
)

#: A new collection starts at a random epoch: a reader that mirrored a deleted collection of
#: the same name must not mistake the new one's counters for the old one's.
_CREATE = "INSERT OR IGNORE INTO ovos_vec_collections (name, epoch) VALUES (?, abs(random() % 1000000000000))"


class CollectionNotFound(EmbeddingsError, ValueError):
    """``get_collection`` of a name that does not exist (OPM documents a ValueError)."""


@dataclasses.dataclass(frozen=True)
class Collection:
    """What ``create_collection``/``get_collection``/``list_collections`` return."""

    name: str
    metadata: dict[str, Any]
    dim: int | None
    count: int


@dataclasses.dataclass(frozen=True)
class SqliteEmbeddingsConfig:
    path: str | None = option(None, "SQLite file; null: $XDG_DATA_HOME/ovos/embeddings.db; "
                              "':memory:' keeps everything in RAM", kind=str)
    default_collection: str = option("ovos_embeddings", "collection used when a call names none")
    use_blas: bool = option(False, "score with numpy's multithreaded BLAS (faster alone on an idle machine; "
                            "slower next to an embedder's thread pool on a small one)")


class SqliteEmbeddingsDB(SingleKeyCalls, EmbeddingsDB):
    """float32 vectors and JSON metadata in SQLite; exact cosine top-k over a RAM matrix.

    Args:
        config: ``{"path": ..., "default_collection": ...}`` (see :class:`SqliteEmbeddingsConfig`).
        path: shortcut for ``config["path"]`` (OPM callers construct DB plugins both ways).
    """

    def __init__(self, config: Mapping[str, Any] | None = None, path: str | None = None):
        raw = dict(config or {})
        if path is not None:
            raw["path"] = path
        super().__init__(raw)
        self.settings = parse_config(SqliteEmbeddingsConfig, raw, PLUGIN_NAME)
        numpy_module()
        self.path = self.settings.path or default_path(DEFAULT_FILE)
        self._db: Database = open_database(self.path)
        self._db.migrate("vectordb", _MIGRATIONS)
        self._mirrors: dict[str, Matrix] = {}
        self._lock = threading.RLock()  # taken inside the Database lock, never around it
        self._closed = False

    @property
    def database(self) -> Database:
        """The SQLite database the vectors are in: shared with every store of this process on the same
        file, so a memory keeping its documents there writes both in one transaction."""
        return self._db

    # -- collections ---------------------------------------------------------------------
    def create_collection(self, name: str, metadata: dict[str, Any] | None = None) -> Collection:
        """Create ``name`` if missing (idempotent); ``metadata``, when given, replaces the old."""
        name = check_name(name)
        with self._db.atomic() as con:
            con.execute(_CREATE, (name,))
            if metadata is not None:
                con.execute("UPDATE ovos_vec_collections SET metadata = ? WHERE name = ?",
                            (json.dumps(dict(metadata), ensure_ascii=False), name))
        return self.get_collection(name)

    def get_collection(self, name: str) -> Collection:
        rows = self._db.execute(
            "SELECT c.name, c.metadata, c.dim, (SELECT COUNT(*) FROM ovos_vec_items i WHERE i.collection = c.name) "
            "FROM ovos_vec_collections c WHERE c.name = ?", (check_name(name),))
        if not rows:
            raise CollectionNotFound(f"{PLUGIN_NAME}: no collection named {name!r}")
        return _collection(rows[0])

    def collection_metadata(self, name: str) -> dict[str, Any] | None:
        """The metadata of ``name`` (None if there is no such collection): one row read, no count,
        cheap enough for every query (in a transaction of this database, it reads within it)."""
        rows = self._db.execute("SELECT metadata FROM ovos_vec_collections WHERE name = ?", (check_name(name),))
        return load_metadata(rows[0][0]) if rows else None

    def delete_collection(self, name: str) -> None:
        name = check_name(name)
        with self._db.atomic() as con:
            con.execute("DELETE FROM ovos_vec_items WHERE collection = ?", (name,))
            con.execute("DELETE FROM ovos_vec_collections WHERE name = ?", (name,))
            with self._lock:
                self._mirrors.pop(name, None)

    def list_collections(self) -> list[Collection]:
        rows = self._db.execute(
            "SELECT c.name, c.metadata, c.dim, (SELECT COUNT(*) FROM ovos_vec_items i WHERE i.collection = c.name) "
            "FROM ovos_vec_collections c ORDER BY c.name")
        return [_collection(r) for r in rows]

    # -- writes --------------------------------------------------------------------------
    def add_embeddings_batch(self, keys: Sequence[str], embeddings: Sequence[Any],
                             metadata: Sequence[dict[str, Any] | None] | None = None,
                             collection_name: str | None = None) -> None:
        """Store (or replace) many vectors in one transaction."""
        batch = checked_batch(keys, embeddings, metadata)
        if batch is None:
            return
        keys, vectors, metas, order = batch
        name = self._name(collection_name)
        with self._db.atomic() as con:
            mirror = self._sync(con, name, create=True)
            if mirror.dim is None:
                mirror = self._fix_dim(con, name, vectors.shape[1])
            if vectors.shape[1] != mirror.dim:
                raise EmbeddingsError(f"{PLUGIN_NAME}: collection {name!r} holds {mirror.dim}-dim vectors, "
                                      f"got {vectors.shape[1]} (a different embedder?)")
            replaced = any(keys[i] in mirror.pos for i in order)
            rows = [(name, keys[i], vectors[i].astype("<f4").tobytes(), dump_metadata(metas[i])) for i in order]
            try:
                if replaced:  # a new row id, so other readers see a replacement as delete + add
                    con.executemany("DELETE FROM ovos_vec_items WHERE collection = ? AND key = ?",
                                    [(name, keys[i]) for i in order if keys[i] in mirror.pos])
                con.executemany("INSERT INTO ovos_vec_items (collection, key, vector, metadata) VALUES (?, ?, ?, ?)",
                                rows)
                max_id = con.execute("SELECT MAX(id) FROM ovos_vec_items").fetchone()[0]
                self._bump(con, name, mirror, replaced)
                with self._lock:
                    units = unit_rows(vectors[order])
                    for j, i in enumerate(order):
                        mirror.put(keys[i], units[j], metas[i])
                    mirror.max_id = max(mirror.max_id, int(max_id or 0))
            except BaseException:
                self._invalidate(name)  # the transaction rolls back; so must the mirror
                raise

    def delete_embeddings_batch(self, keys: Sequence[str], collection_name: str | None = None) -> None:
        """Delete ``keys`` (missing ones are ignored) in one transaction."""
        keys = [check_key(k) for k in keys]
        if not keys:
            return
        name = self._name(collection_name)
        with self._db.atomic() as con:
            mirror = self._sync(con, name)
            if mirror is None:
                return
            present = [k for k in dict.fromkeys(keys) if k in mirror.pos]
            if not present:
                return
            try:
                con.executemany("DELETE FROM ovos_vec_items WHERE collection = ? AND key = ?",
                                [(name, k) for k in present])
                self._bump(con, name, mirror, True)
                with self._lock:
                    for key in present:
                        mirror.remove(key)
            except BaseException:
                self._invalidate(name)
                raise

    def delete_where(self, where: Mapping[str, Any], collection_name: str | None = None) -> int:
        """Delete every item whose metadata holds all of ``where``, damaged rows included (a forget
        must reach what searches leave out); returns how many."""
        name = self._name(collection_name)
        # Only rows whose text holds each value as this store writes it are read back and checked
        # (a forget must not parse every row's JSON of a large collection under the write lock).
        patterns = [f"%{_like_escaped(json.dumps(v, ensure_ascii=False))}%" for v in where.values()]
        like = "".join(" AND metadata LIKE ? ESCAPE '\\'" for _ in patterns)
        with self._db.atomic() as con:
            rows = con.execute(f"SELECT id, metadata FROM ovos_vec_items WHERE collection = ?{like}",
                               (name, *patterns)).fetchall()
            doomed = [(row_id,) for row_id, meta in rows if _holds(meta, where)]
            if doomed:
                con.executemany("DELETE FROM ovos_vec_items WHERE id = ?", doomed)
                self._bump(con, name, None, True)
                self._invalidate(name)
        return len(doomed)

    # -- reads ---------------------------------------------------------------------------
    def get_embeddings_batch(self, keys: Sequence[str], collection_name: str | None = None,
                             return_metadata: bool = False) -> list[tuple[Any, ...]]:
        """``(key, vector)`` or ``(key, vector, metadata)`` per key, in order; None/{} when missing."""
        np = numpy_module()
        keys = [check_key(k) for k in keys]
        name = self._name(collection_name)
        found: dict[str, tuple[Any, dict[str, Any]]] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            for key, blob, meta in self._db.execute(
                    f"SELECT key, vector, metadata FROM ovos_vec_items WHERE collection = ? AND key IN ({marks})",
                    (name, *chunk)):
                found[key] = (np.frombuffer(blob, dtype="<f4").astype(np.float32), load_metadata(meta))
        out: list[tuple[Any, ...]] = []
        for key in keys:
            vector, meta = found.get(key, (None, {}))
            out.append((key, vector, meta) if return_metadata else (key, vector))
        return out

    def count_embeddings_in_collection(self, collection_name: str | None = None) -> int:
        rows = self._db.execute("SELECT COUNT(*) FROM ovos_vec_items WHERE collection = ?",
                                (self._name(collection_name),))
        return int(rows[0][0])

    def query(self, embeddings: Any, top_k: int = 5, return_metadata: bool = False,
              collection_name: str | None = None, where: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """The ``top_k`` nearest stored vectors by cosine distance (``1 - cosine``), nearest first.

        Args:
            embeddings: the query vector.
            top_k: how many results at most.
            return_metadata: add each item's metadata dict (a copy) as a third element.
            collection_name: the collection; the default one when None.
            where: ``{key: value}`` pairs the metadata must all equal; applied before ranking,
                so up to ``top_k`` matching items come back even when others dominate.
        """
        np = numpy_module()
        q = as_vector(embeddings)
        k = int(top_k)
        if k <= 0:
            return []
        norm = float(np.linalg.norm(q))
        if norm > 0:
            q = q / np.float32(norm)
        name = self._name(collection_name)
        with self._db.read() as con:
            mirror = self._sync(con, name)
            if mirror is None or mirror.n == 0:
                return []
            with self._lock:
                if q.shape[0] != mirror.dim:
                    raise EmbeddingsError(f"{PLUGIN_NAME}: query has {q.shape[0]} dims, collection {name!r} "
                                          f"holds {mirror.dim}")
                return self._top_k(mirror, q, k, return_metadata, where)

    def similarities(self, embeddings: Any, keys: Sequence[str],
                     collection_name: str | None = None) -> list[float | None]:
        """The cosine similarity of the query vector with each key's stored vector, as ``query``
        computes it (``1 - distance``); None for a key the collection does not hold.

        A lookup in the RAM matrix: scoring a handful of known items costs microseconds, where
        asking ``query`` for them would rank the whole collection.
        """
        np = numpy_module()
        q = as_vector(embeddings)
        norm = float(np.linalg.norm(q))
        if norm > 0:
            q = q / np.float32(norm)
        keys = [check_key(k) for k in keys]
        name = self._name(collection_name)
        with self._db.read() as con:
            mirror = self._sync(con, name)
            if mirror is None or mirror.n == 0 or not keys:
                return [None] * len(keys)
            with self._lock:
                if q.shape[0] != mirror.dim:
                    raise EmbeddingsError(f"{PLUGIN_NAME}: query has {q.shape[0]} dims, collection {name!r} "
                                          f"holds {mirror.dim}")
                rows = [mirror.pos.get(k) for k in keys]
                known = [r for r in rows if r is not None]
                scores = iter(self._score(mirror.rows[known], q).tolist() if known else ())
                return [1.0 - max(0.0, 1.0 - float(next(scores))) if r is not None else None for r in rows]

    # -- lifecycle -----------------------------------------------------------------------
    def compact(self) -> bool:
        """Rewrite the file without the bytes of deleted vectors and metadata (see Database.compact)."""
        return self._db.compact()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self._lock:
                self._mirrors.clear()
            release_database(self._db)

    def __enter__(self) -> SqliteEmbeddingsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------
    def _name(self, collection_name: str | None) -> str:
        return check_name(collection_name if collection_name is not None else self.settings.default_collection)

    def _top_k(self, mirror: Matrix, q: Any, k: int, return_metadata: bool,
               where: Mapping[str, Any] | None) -> list[tuple[Any, ...]]:
        np = numpy_module()
        rows = None  # the row numbers behind ``scores``; None: score i is row i
        if where:
            matching = np.flatnonzero(mirror.mask(where))
            if not matching.size:
                return []
        if not where or 2 * matching.size > mirror.n:
            scores = self._score(mirror.rows[:mirror.n], q)
            if where:  # a filter keeping most rows: score them all, then drop the others
                kept = np.full(mirror.n, -np.inf, dtype=scores.dtype)
                kept[matching] = scores[matching]
                scores = kept
            limit = matching.size if where else mirror.n
        else:  # a selective filter (one session among many): score only its rows
            rows = matching
            scores = self._score(mirror.rows[rows], q)
            limit = rows.size
        k = min(k, limit)
        if k < scores.shape[0]:
            picked = np.argpartition(-scores, k - 1)[:k]
            picked = picked[np.argsort(-scores[picked], kind="stable")]
        else:
            picked = np.argsort(-scores, kind="stable")[:k]
        out: list[tuple[Any, ...]] = []
        for pos in picked.tolist():
            row = pos if rows is None else int(rows[pos])
            distance = max(0.0, 1.0 - float(scores[pos]))
            if return_metadata:
                out.append((mirror.keys[row], distance, dict(mirror.meta[row] or {})))
            else:
                out.append((mirror.keys[row], distance))
        return out

    def _score(self, rows: Any, q: Any) -> Any:
        """Cosine similarity of each unit row with the unit query."""
        if self.settings.use_blas:
            return rows @ q
        # numpy's own single-threaded loop, not BLAS. On a small machine the BLAS thread pool
        # fights the embedder's (OpenMP) pool that has just run the query embedding: measured
        # on 2 cores at 10k rows, right after an e5 call, BLAS took 3-4 ms (p90 7-40 ms) and
        # this 0.7 ms (p90 < 1 ms). Alone on an idle machine BLAS is faster (0.1 ms).
        return numpy_module().einsum("ij,j->i", rows, q)

    def _sync(self, con: Any, name: str, create: bool = False) -> Any:
        """The mirror of ``name``, brought up to date with the file; None if it does not exist."""
        row = con.execute("SELECT dim, version, epoch FROM ovos_vec_collections WHERE name = ?", (name,)).fetchone()
        if row is None and create:
            con.execute(_CREATE, (name,))
            row = con.execute("SELECT dim, version, epoch FROM ovos_vec_collections WHERE name = ?", (name,)).fetchone()
        with self._lock:
            if row is None:
                self._mirrors.pop(name, None)
                return None
            dim, version, epoch = row
            mirror = self._mirrors.get(name)
            if mirror is not None and (mirror.version, mirror.epoch, mirror.dim) == (version, epoch, dim):
                return mirror
            # Ahead of the file: a write of ours was rolled back with an enclosing transaction (a
            # memory's, that also marks its documents), and the rows it put in RAM are not on disk.
            if mirror is None or mirror.epoch != epoch or mirror.dim != dim or mirror.version > version:
                mirror = Matrix(dim)  # something was deleted or replaced elsewhere: reload all
                self._mirrors[name] = mirror
            self._load_rows(con, name, mirror)  # only rows added since the mirror's last id
            mirror.version, mirror.epoch = version, epoch
            return mirror

    def _load_rows(self, con: Any, name: str, mirror: Matrix) -> None:
        np = numpy_module()
        rows = con.execute("SELECT id, key, vector, metadata FROM ovos_vec_items WHERE collection = ? AND id > ? "
                           "ORDER BY id", (name, mirror.max_id)).fetchall()
        if not rows or mirror.dim is None:
            return
        # A row of the wrong length or holding NaN or infinity (a damaged page SQLite's checks do
        # not see; every cosine with NaN would sort first) is left out, and said once per load:
        # one bad vector must not cost every search of the collection.
        whole = [isinstance(r[2], bytes) and len(r[2]) == 4 * mirror.dim for r in rows]
        sized = [r for r, ok in zip(rows, whole) if ok]
        matrix = np.frombuffer(b"".join(r[2] for r in sized), dtype="<f4").reshape(len(sized), mirror.dim)
        finite = np.isfinite(matrix).all(axis=1)
        good, matrix = [r for r, ok in zip(sized, finite.tolist()) if ok], matrix[finite]
        if len(good) < len(rows):
            bad = [str(r[1]) for r, ok in zip(rows, whole) if not ok] + \
                [str(r[1]) for r, ok in zip(sized, finite.tolist()) if not ok]
            _damaged_log.error(name, "%s: collection %r holds %d damaged vector(s) (%s%s); they are left out of "
                               "searches (forget or re-import those items, or delete the collection to re-embed "
                               "everything)", PLUGIN_NAME, name, len(bad), ", ".join(map(repr, bad[:3])),
                               ", ..." if len(bad) > 3 else "")
        if good:
            # Keys are unique per collection and a replaced key forces a full reload, so the rows
            # after max_id are all new to the mirror.
            mirror.extend([r[1] for r in good], unit_rows(matrix), [load_metadata(r[3]) or None for r in good])
        mirror.max_id = int(rows[-1][0])

    def _fix_dim(self, con: Any, name: str, dim: int) -> Matrix:
        con.execute("UPDATE ovos_vec_collections SET dim = ? WHERE name = ?", (dim, name))
        with self._lock:
            mirror = Matrix(dim)
            version, epoch = con.execute("SELECT version, epoch FROM ovos_vec_collections WHERE name = ?",
                                         (name,)).fetchone()
            mirror.version, mirror.epoch = version, epoch
            self._mirrors[name] = mirror
            return mirror

    def _bump(self, con: Any, name: str, mirror: Matrix | None, new_epoch: bool) -> None:
        con.execute("UPDATE ovos_vec_collections SET version = version + 1, epoch = epoch + ? WHERE name = ?",
                    (int(new_epoch), name))
        if mirror is None:  # none loaded here: other readers see the counters
            return
        with self._lock:
            mirror.version += 1
            mirror.epoch += int(new_epoch)

    def _invalidate(self, name: str) -> None:
        with self._lock:
            self._mirrors.pop(name, None)


#: Damaged vector rows, said once per collection and process (a reload finds them again).
_damaged_log = LogOnce()


def _like_escaped(text: str) -> str:
    """``text`` matched literally by LIKE ... ESCAPE '\\'."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _holds(stored: str | None, where: Mapping[str, Any]) -> bool:
    """Whether stored metadata holds every pair of ``where`` (damaged JSON holds nothing)."""
    try:
        meta = load_metadata(stored)
    except ValueError:
        return False
    return isinstance(meta, dict) and all(meta.get(k) == v for k, v in where.items())


def _collection(row: Iterable[Any]) -> Collection:
    name, meta, dim, count = row
    return Collection(name, load_metadata(meta), dim, int(count))

