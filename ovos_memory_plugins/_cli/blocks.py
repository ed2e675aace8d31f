"""The blocks of a memory's config, its composite members' included, and the files they name."""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from .._core.paths import files_in, is_memory_path, resolve_path
from ..errors import ConfigError

__all__ = ["config_blocks", "store_files"]


def config_blocks(module: str, block: Mapping[str, Any],
                  where: str = "") -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """``(module, config, where)`` of a memory's block and, for a composite, of each member's
    (``where``: "members[1] ", to name it), nested composites included."""
    yield module, block, where
    if module != "ovos-memory-plugin-composite":
        return
    for i, spec in enumerate(block.get("members") or []):
        if isinstance(spec, Mapping) and isinstance(spec.get("config") or {}, Mapping):
            yield from config_blocks(str(spec.get("module", "")), spec.get("config") or {}, f"{where}members[{i}] ")


def store_files(module: str, block: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """``(file, given relative)`` of each store file a memory's config names (``db_path``, its
    members' included), resolved as the memory resolves it: a relative path under the data
    folder, or under the ``data_dir`` of the composite around it."""
    out: dict[str, bool] = {}
    path = block.get("db_path")
    if isinstance(path, str) and path.strip() and not is_memory_path(path) and "://" not in path:
        try:
            out[resolve_path(path)] = not os.path.isabs(os.path.expandvars(os.path.expanduser(path)))
        except ConfigError:
            pass
    if module == "ovos-memory-plugin-composite":
        folder = block.get("data_dir") if isinstance(block.get("data_dir"), str) and block["data_dir"].strip() else None
        with files_in(folder):
            for spec in block.get("members") or []:
                if isinstance(spec, Mapping) and isinstance(spec.get("config") or {}, Mapping):
                    out.update(store_files(str(spec.get("module", "")), spec.get("config") or {}))
    return list(out.items())
