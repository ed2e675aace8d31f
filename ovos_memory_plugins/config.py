"""Typed configuration: a persona's config dict in, a frozen dataclass out.

Each backend declares its keys once, as fields of a frozen dataclass made with :func:`option`.
:func:`parse_config` reads the caller's dict (never mutating it), applies defaults, rejects bad
values with a :class:`~ovos_memory_plugins.errors.ConfigError` that names the key and what is
allowed, and warns about unknown keys with the closest valid one. Nested blocks are spelled as
dotted keys (``retrieval.max_num_results`` reads ``config["retrieval"]["max_num_results"]``).
Keys starting with ``_`` are private injection points (a connection, a fake embedder) and are
never warned about.

Example::

    >>> @dataclasses.dataclass(frozen=True)
    ... class Demo:
    ...     max_history: int = option(10, "messages kept", minimum=0)
    ...     mode: str = option("a", "how", choices=("a", "b"))
    >>> parse_config(Demo, {"max_history": 4}, "demo")
    Demo(max_history=4, mode='a')
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any, TypeVar

from ._core.log import LOG
from .errors import ConfigError

__all__ = ["UNSET", "check_config", "config_keys", "option", "parse_config", "replace_setting", "setting_names"]

T = TypeVar("T")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


#: "Not given", as distinct from ``None`` (which often means "off" or "keep all").
UNSET: Any = _Unset()


def option(
    default: Any,
    doc: str,
    *,
    key: str | None = None,
    kind: type | tuple[type, ...] | None = None,
    choices: tuple[Any, ...] | None = None,
    minimum: float | None = None,
    nullable: bool = False,
    aliases: tuple[str, ...] = (),
) -> Any:
    """Declare one config key as a dataclass field.

    Args:
        default: the value when the key is absent (a list or dict default is copied per use).
        doc: one line for the generated docs tables.
        key: the dotted config key, when it differs from the field name.
        kind: accepted type(s); inferred from ``default`` when not given.
        choices: the allowed values.
        minimum: the smallest allowed number.
        nullable: whether ``null``/``None`` is allowed.
        aliases: other keys accepted for this value (older spellings).
    """
    if kind is None:
        kind = type(default) if default is not None else object
    if kind is float:
        kind = (int, float)
    meta = {
        "key": key, "doc": doc, "kind": kind, "choices": choices, "minimum": minimum,
        "nullable": nullable or default is None, "aliases": aliases,
    }
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def config_keys(cls: type) -> list[tuple[str, dataclasses.Field[Any]]]:
    """``(dotted key, field)`` for every option of a config dataclass, in declaration order."""
    return [(f.metadata.get("key") or f.name, f) for f in dataclasses.fields(cls) if "doc" in f.metadata]


def _lookup(raw: Mapping[str, Any], dotted: str) -> Any:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return UNSET
        node = node[part]
    return node


def _type_name(kind: Any) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _check_value(owner: str, key: str, value: Any, meta: Mapping[str, Any]) -> Any:
    if value is None:
        if meta["nullable"]:
            return None
        raise ConfigError(f"{owner}: '{key}' must not be null")
    kind = meta["kind"]
    # bool is an int in Python; a boolean where a number is expected is a mistake.
    kinds = kind if isinstance(kind, tuple) else (kind,)
    bad_bool = isinstance(value, bool) and bool not in kinds
    if kind is not object and (bad_bool or not isinstance(value, kind)):
        raise ConfigError(f"{owner}: '{key}' must be {_type_name(kind)}, got {type(value).__name__} {value!r}")
    if meta["choices"] is not None and value not in meta["choices"]:
        allowed = ", ".join(repr(c) for c in meta["choices"])
        raise ConfigError(f"{owner}: '{key}' is {value!r}; allowed values are {allowed}")
    if meta["minimum"] is not None and value < meta["minimum"]:
        raise ConfigError(f"{owner}: '{key}' is {value!r}; it must be >= {meta['minimum']}")
    if isinstance(value, (list, dict)):
        value = type(value)(value)  # never share the caller's containers
    return value


def _flatten(raw: Mapping[str, Any], nested: set[str], prefix: str = "") -> list[str]:
    keys = []
    for name, value in raw.items():
        dotted = f"{prefix}{name}"
        if isinstance(value, Mapping) and dotted in nested:
            keys.extend(_flatten(value, nested, dotted + "."))
        else:
            keys.append(dotted)
    return keys


def unknown_keys(cls: type, raw: Mapping[str, Any], extra_known: tuple[str, ...] = ()) -> list[str]:
    """Messages naming each unknown key of ``raw``, with the closest valid key when there is one."""
    known = set(extra_known)
    for key, field in config_keys(cls):
        known.add(key)
        known.update(field.metadata["aliases"])
    nested = {k.rsplit(".", 1)[0] for k in known if "." in k}
    problems = []
    for key in _flatten(raw, nested):
        if key in known or key.split(".")[-1].startswith("_"):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        problems.append(f"unknown config key '{key}'{hint}")
    return problems


def parse_config(cls: type[T], raw: Mapping[str, Any] | None, owner: str,
                 extra_known: tuple[str, ...] = ()) -> T:
    """Build the frozen config ``cls`` from a persona's dict; see the module docstring.

    Args:
        cls: a dataclass whose fields were declared with :func:`option`.
        raw: the caller's dict (``None`` means empty); it is not modified.
        owner: the backend name used in messages (``"ovos-memory-plugin-lexical"``).
        extra_known: keys read elsewhere that must not be reported as unknown.
    """
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{owner}: config must be a dict, not {type(raw).__name__}")
    values = {}
    for key, field in config_keys(cls):
        value = _lookup(raw, key)
        for alias in field.metadata["aliases"]:
            if value is UNSET:
                value = _lookup(raw, alias)
        if value is not UNSET:
            values[field.name] = _check_value(owner, key, value, field.metadata)
    for problem in unknown_keys(cls, raw, extra_known):
        LOG.warning(f"{owner}: {problem}")
    return cls(**values)


_SETTING_NAMES: dict[type, frozenset[str]] = {}


def setting_names(cls: type) -> frozenset[str]:
    """The field names of a config dataclass (also the instance attributes that read them)."""
    names = _SETTING_NAMES.get(cls)
    if names is None:
        names = _SETTING_NAMES[cls] = frozenset(f.name for _key, f in config_keys(cls))
    return names


def replace_setting(settings: T, name: str, value: Any, owner: str) -> T:
    """``settings`` with one field changed, checked as the config dict's value would be."""
    for key, field in config_keys(type(settings)):
        if field.name == name:
            return dataclasses.replace(settings, **{name: _check_value(owner, key, value, field.metadata)})  # type: ignore[type-var]
    raise AttributeError(f"{owner}: no setting {name!r}")


def check_config(cls: type, raw: Mapping[str, Any] | None, owner: str,
                 extra_known: tuple[str, ...] = ()) -> list[str]:
    """Every problem with ``raw`` as a list of messages (strict mode for ``check-config``)."""
    problems = [f"{owner}: {p}" for p in unknown_keys(cls, raw or {}, extra_known)]
    try:
        parse_config(cls, raw, owner, extra_known)
    except ConfigError as exc:
        problems.insert(0, str(exc))
    return problems
