"""Table prefixes claimed by name, so several namespaces (local-rag's collections) share one database.

A memory's tables are named from a prefix. Before namespaces had prefixes of their own, every
collection in a file used the same tables (its window and document log), so two memories that
differed only by collection saw each other's exchanges. Now each name claims a prefix once, in a
small registry table, and keeps it:

* ``first`` (the prefix every store used before) goes to the name an older store was written
  under, when the caller can tell (local-rag: the one collection its vectors are in), else to the
  first name to open the database: a store from before keeps its tables and its memories;
* every other name gets ``<first>__<name>_<digest>``: the name made safe for SQL, cut short, and
  a digest of the whole name, so two names that read alike ("a-b", "ab") never share tables.

A read-only database is never written: a name it has not registered gets the prefix it would claim.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ..errors import StorageError
from .windows import safe_table_name

__all__ = ["claim_prefix", "own_prefix"]

#: Characters of the name kept in a prefix (PostgreSQL cuts identifiers at 63 bytes; a store adds
#: suffixes such as ``_docs_own_vectors`` to its prefix).
_NAME_CHARS = 12

_MIGRATIONS = [
    "CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY, prefix TEXT NOT NULL UNIQUE)",
]


def own_prefix(first: str, name: str) -> str:
    """The prefix ``name`` gets when ``first`` is taken by another name."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{first}__{safe_table_name(name).lstrip('_')[:_NAME_CHARS]}_{digest}"


def claim_prefix(db: Any, first: str, name: str, legacy_owner: Callable[[], str | None] | None = None,
                 kind: str = "namespace") -> str:
    """The table prefix of namespace ``name`` in ``db`` (claimed now if it had none).

    ``legacy_owner``: for a database with no claims yet, the name that already owns ``first``'s
    tables if it can tell (a store from before, written under that name), else None: then the
    first name to open the database claims them. ``kind`` names a namespace in errors.
    """
    table = f"{first}_namespaces"
    if db.read_only:
        claims = _registered(db, table) or _legacy(legacy_owner, first)
        if claims and name not in claims:  # nothing of it here: say what is, rather than "no table"
            raise StorageError(f"{db.path} holds no {kind} {name!r} (it holds {', '.join(map(repr, sorted(claims)))}); "
                               f"set '{kind}' to the one you mean; it was left as it is")
        return _choose(claims, first, name)
    db.migrate(f"namespaces:{table}", [m.format(t=table) for m in _MIGRATIONS])
    claims = _registered(db, table)
    prefix = claims[name] if name in claims else _claim(db, table, first, name,
                                                        {} if claims else _legacy(legacy_owner, first))
    _remember(db, table, name, prefix)
    return prefix


def _claim(db: Any, table: str, first: str, name: str, seed: dict[str, str]) -> str:
    def claim(con: Any) -> str:
        claims = {row[0]: row[1] for row in con.execute(f"SELECT name, prefix FROM {table}").fetchall()}
        for owner, prefix in seed.items() if not claims else ():
            con.execute(f"INSERT INTO {table} (name, prefix) VALUES (?, ?)", (owner, prefix))
            claims[owner] = prefix
        prefix = _choose(claims, first, name)
        if name not in claims:
            con.execute(f"INSERT INTO {table} (name, prefix) VALUES (?, ?)", (name, prefix))
        return prefix

    try:
        return db.transaction(claim)
    except StorageError:
        # Another process claimed a prefix between our read and our write (the registry's
        # keys refused the second claim): read the claims again, now settled.
        return db.transaction(claim)


def _remember(db: Any, table: str, name: str, prefix: str) -> None:
    """Record the claim among the file's migrations too: a damaged SQLite file is replaced by a
    new one on which they are replayed, and a claim lost there would give this name's tables to
    another name (or this name other tables) in the next process."""
    if db.engine != "sqlite":
        return  # a PostgreSQL database is never replaced under a running memory
    literal = "CAST(X'" + name.encode("utf-8", "surrogatepass").hex() + "' AS TEXT)"  # any text, no quoting
    db.migrate(f"namespaces:{table}:{prefix}",
               [f"INSERT OR IGNORE INTO {table} (name, prefix) VALUES ({literal}, '{prefix}')"])


def _legacy(legacy_owner: Callable[[], str | None] | None, first: str) -> dict[str, str]:
    owner = legacy_owner() if legacy_owner else None
    return {owner: first} if owner is not None else {}


def _choose(claims: dict[str, str], first: str, name: str) -> str:
    if name in claims:
        return claims[name]
    return first if first not in claims.values() else own_prefix(first, name)


def _registered(db: Any, table: str) -> dict[str, str]:
    """The claims recorded in ``db`` (none when it has no registry yet)."""
    try:
        return {row[0]: row[1] for row in db.execute(f"SELECT name, prefix FROM {table}")}
    except StorageError:  # a store from before namespaces: no registry, every name is unclaimed
        return {}
