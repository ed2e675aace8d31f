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
import json
import math
import string
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from ._core.log import LOG
from .errors import ConfigError

__all__ = ["check_config", "check_template", "config_keys", "MAXIMUM", "option", "parse_config", "replace_setting",
           "setting_names", "UNSET"]

T = TypeVar("T")

#: The largest number any key accepts unless it declares its own ``maximum``: no count, size,
#: token budget or number of seconds (31 years) a memory uses comes near it, and it keeps every
#: value inside SQLite's, Redis's and the OS's 64-bit arithmetic (10**30 turns would overflow).
MAXIMUM = 10**9


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
    maximum: float | None = None,
    nullable: bool = False,
    aliases: tuple[str, ...] = (),
    otherwise: Any = UNSET,
    read_as: Mapping[Any, Any] | None = None,
) -> Any:
    """Declare one config key as a dataclass field.

    Args:
        default: the value when the key is absent (a list or dict default is copied per use).
        doc: one line for the generated docs tables.
        key: the dotted config key, when it differs from the field name.
        kind: accepted type(s); inferred from ``default`` when not given.
        choices: the allowed values.
        minimum: the smallest allowed number.
        maximum: the largest allowed number (every number has one: :data:`MAXIMUM` by default).
        nullable: whether ``null``/``None`` is allowed.
        aliases: other keys accepted for this value (older spellings).
        otherwise: the value read, with a warning, for one outside ``choices`` (one of them
            spelt in other case is that one), where the reference package read any other value
            so: a persona written for it keeps loading.
        read_as: values outside ``choices`` (or below ``minimum``) read, with a warning, as
            another (``{"global": "session"}``, ``{0: 1}``): the ones a persona written for the
            reference may hold; any other value is still refused.
    """
    if kind is None:
        kind = type(default) if default is not None else object
    if kind is float:
        kind = (int, float)
    meta = {
        "key": key, "doc": doc, "kind": kind, "choices": choices, "minimum": minimum,
        "maximum": MAXIMUM if maximum is None else maximum,
        "nullable": nullable or default is None, "aliases": aliases, "otherwise": otherwise,
        "read_as": dict(read_as or {}),
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


#: A value's type as a persona file (JSON) writes it: its author need not know Python's names.
_JSON_KINDS = {dict: "an object {...}", list: "a list [...]", str: "a string", int: "a whole number",
               float: "a number", bool: "true or false", type(None): "null"}


def _type_name(kind: Any) -> str:
    kinds = set(kind if isinstance(kind, tuple) else (kind,))
    if {int, float} <= kinds:  # a number, whole or not
        kinds -= {int}
    return " or ".join(_JSON_KINDS.get(k, k.__name__) for k in sorted(kinds, key=lambda k: k.__name__))


def described(value: Any) -> str:
    """``value`` as a message names what was given, in JSON's terms: "a string '30'"."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)  # null, true, false
    name = _JSON_KINDS.get(type(value), type(value).__name__).removesuffix(" {...}").removesuffix(" [...]")
    shown = json.dumps(value, ensure_ascii=False, default=repr) if isinstance(value, (dict, list)) else repr(value)
    return f"{name} {shown if len(shown) <= 80 else shown[:79] + '…'}"


def did_you_mean(word: str, options: Collection[str]) -> str:
    """``"; did you mean 'X'?"`` for the option closest to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, sorted(options), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _check_value(owner: str, key: str, value: Any, meta: Mapping[str, Any]) -> Any:
    if value is None:
        if meta["nullable"]:
            return None
        raise ConfigError(f"{owner}: '{key}' must not be null")
    kind = meta["kind"]
    # bool is an int in Python; a boolean where a number is expected is a mistake.
    kinds = kind if isinstance(kind, tuple) else (kind,)
    value = _as_written_elsewhere(value, kinds)
    bad_bool = isinstance(value, bool) and bool not in kinds
    if kind is not object and (bad_bool or not isinstance(value, kind)):
        raise ConfigError(f"{owner}: '{key}' must be {_type_name(kind)}, got {described(value)}")
    if meta["choices"] is not None and value not in meta["choices"]:
        allowed = ", ".join(repr(c) for c in meta["choices"])
        raise ConfigError(f"{owner}: '{key}' is {value!r}; allowed values are {allowed}")
    if _is_number(value):
        _check_number(owner, key, value, meta)
    if isinstance(value, (list, dict)):
        value = type(value)(value)  # never share the caller's containers
    return value


def _as_written_elsewhere(value: Any, kinds: tuple[Any, ...]) -> Any:
    """A whole number written as a float (``5.0``, as some editors and YAML write it) for an int
    key, and ``0``/``1`` for a bool key, read as meant: the reference computed with both."""
    if isinstance(value, float) and int in kinds and float not in kinds and value.is_integer():
        return int(value)
    if bool in kinds and int not in kinds and type(value) is int and value in (0, 1):
        return bool(value)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_number(owner: str, key: str, value: float, meta: Mapping[str, Any]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{owner}: '{key}' is {value!r}; it must be a finite number")
    if meta["minimum"] is not None and value < meta["minimum"]:
        raise ConfigError(f"{owner}: '{key}' is {value!r}; it must be >= {meta['minimum']}")
    # A key whose values may be negative (a score) is bounded on both sides.
    bound = meta.get("maximum", MAXIMUM)
    if value > bound:
        raise ConfigError(f"{owner}: '{key}' is {value!r}; it must be <= {bound:,}")
    if meta["minimum"] is None and value < -bound:
        raise ConfigError(f"{owner}: '{key}' is {value!r}; it must be >= {-bound:,}")


def _item_kind(cls: type, name: str) -> type | None:
    """The element type of a ``list[X]`` field (None when any element goes)."""
    kinds = _ITEM_KINDS.get(cls)
    if kinds is None:
        kinds = _ITEM_KINDS[cls] = {}
        for field_name, hint in typing.get_type_hints(cls).items():
            union = typing.get_origin(hint) in (typing.Union, types.UnionType)  # Optional[...] or X | None
            for option in (typing.get_args(hint) if union else ()) or (hint,):
                if typing.get_origin(option) is list and typing.get_args(option):
                    item = typing.get_args(option)[0]
                    item = typing.get_origin(item) or item
                    if isinstance(item, type) and item not in (object, typing.Any):
                        kinds[field_name] = item
    return kinds.get(name)


_ITEM_KINDS: dict[type, dict[str, type]] = {}


def _check_items(owner: str, key: str, value: Any, kind: type | None) -> None:
    if kind is None or not isinstance(value, list):
        return
    for i, item in enumerate(value):
        if not isinstance(item, kind) or (isinstance(item, bool) and kind is not bool):
            raise ConfigError(f"{owner}: '{key}'[{i}] must be {_type_name(kind)}, got {described(item)}")


def check_template(owner: str, key: str, template: str, fields: tuple[str, ...]) -> None:
    """A ``str.format`` template may name only ``fields``, plainly: no ``!r``, no ``:>999999999``
    (a width a billion wide takes seconds and a gigabyte), no ``{x.attr}`` or ``{x[0]}``."""
    where = f"{owner}: '{key}'" if owner else f"'{key}'"
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"{where} is not a valid template: {exc}") from exc
    for _text, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in fields:
            raise ConfigError(f"{where} may only use the fields {', '.join(fields)}; it uses {{{name}}}")
        if spec or conversion:
            raise ConfigError(f"{where} uses {{{name}{'!' + conversion if conversion else ''}"
                              f"{':' + spec if spec else ''}}}; write a field as {{{name}}}, without a format")


def template_fields(template: str) -> set[str]:
    """The field names a valid ``str.format`` template uses."""
    return {name for _text, name, _spec, _conversion in string.Formatter().parse(template) if name is not None}


def _flatten(raw: Mapping[str, Any], nested: set[str], prefix: str = "") -> list[tuple[str, Any]]:
    keys = []
    for name, value in raw.items():
        dotted = f"{prefix}{name}"
        if isinstance(value, Mapping) and dotted in nested:
            keys.extend(_flatten(value, nested, dotted + "."))
        else:
            keys.append((dotted, value))
    return keys


def unknown_keys(cls: type, raw: Mapping[str, Any], extra_known: tuple[str, ...] = ()) -> list[str]:
    """Messages naming each group of keys given something else, then each unknown key of
    ``raw`` with the closest valid key when there is one."""
    groups, unknown = _key_problems(cls, raw, extra_known)
    return groups + unknown


def _key_problems(cls: type, raw: Mapping[str, Any], extra_known: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``(groups given something else, unknown keys)``: the first are errors, the second warnings."""
    known = set(extra_known)
    for key, field in config_keys(cls):
        known.add(key)
        known.update(field.metadata["aliases"])
    nested = {k.rsplit(".", 1)[0] for k in known if "." in k}
    groups, problems = [], []
    for key, value in _flatten(raw, nested):
        if key in known or key.split(".")[-1].startswith("_"):
            continue
        if key in nested:  # a group of keys given something else ("context": "hdr"); null: no keys
            if value is not None:
                inside = sorted(k.removeprefix(key + ".") for k in known if k.startswith(key + "."))
                groups.append(f"'{key}' must be an object of keys ({', '.join(inside[:4])}"
                              f"{', ...' if len(inside) > 4 else ''}), not {described(value)}")
            continue
        problems.append(f"unknown config key '{key}'{did_you_mean(key, known)}")
    inner = getattr(cls, "unknown_inner_keys", None)  # keys inside a list's items (a composite's members)
    return groups, problems + (inner(raw) if inner is not None else [])


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
    values, errors, warnings = _checked_values(cls, raw, owner)
    if errors:
        raise errors[0]
    groups, unknown = _key_problems(cls, raw, extra_known)
    if groups:  # "retrieval": 5 is a bad value, not a typo: its keys' defaults would stand in unseen
        raise ConfigError(f"{owner}: {groups[0]}")
    for problem in [*warnings, *(f"{owner}: {p}" for p in unknown)]:
        LOG.warning(problem)
    return _build(cls, values, owner)


def _checked_values(cls: type, raw: Mapping[str, Any],
                    owner: str) -> tuple[dict[str, Any], list[ConfigError], list[str]]:
    """The given values, checked; every key's error (not only the first); and the warnings for
    values read another way (:func:`_read_otherwise`)."""
    values, errors, warnings = {}, [], []
    for key, field in config_keys(cls):
        given = [(name, _lookup(raw, name)) for name in (key, *field.metadata["aliases"])]
        given = [(name, value) for name, value in given if value is not UNSET]
        if not given:
            continue
        name, value = given[0]  # the key itself before its aliases; named as the config wrote it
        try:
            if any(other != value for _, other in given[1:]):
                raise ConfigError(f"{owner}: '{key}' is given as {' and '.join(repr(n) for n, _ in given)} with "
                                  "different values; keep one of them")
            read = _read_otherwise(owner, name, value, field)
            if read is not None:
                warnings.append(read[0])
                if read[1] is not UNSET:
                    values[field.name] = read[1]
                continue
            _check_unicode(owner, name, value)
            values[field.name] = _check_value(owner, name, value, field.metadata)
            _check_items(owner, name, values[field.name], _item_kind(cls, field.name))
        except ConfigError as exc:
            errors.append(exc)
    return values, errors, warnings


def _check_unicode(owner: str, key: str, value: Any) -> None:
    """A ConfigError for text that is not valid Unicode anywhere in ``value`` (a lone surrogate
    from a bad decoder): no file, database or log can hold it, and it would fail deep inside a
    turn, every turn, instead of here."""
    stack, seen = [value], set()
    while stack:
        item = stack.pop()
        if isinstance(item, (Mapping, list, tuple)):
            if id(item) in seen:  # a dict built in Python may hold itself: looked at once
                continue
            seen.add(id(item))
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(f"{owner}: '{key}' holds text that is not valid Unicode "
                                  f"({item.encode('utf-8', 'backslashreplace').decode()!r})") from None
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _read_otherwise(owner: str, key: str, value: Any, field: dataclasses.Field[Any]) -> tuple[str, Any] | None:
    """``(warning, value read)`` for a value a persona written for the reference package may hold
    and that is read another way rather than refused (the persona would not load): ``null`` for
    a key that takes none is its default (UNSET), a value outside ``choices`` its ``otherwise``."""
    meta = field.metadata
    if value is None and not meta["nullable"]:
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc,operator]
        return f"{owner}: '{key}' is null; its default {default!r} is used", UNSET
    if isinstance(value, (str, int)) and not isinstance(value, bool) and value in meta["read_as"]:
        read = meta["read_as"][value]
        if meta["choices"] is None:  # a number the reference read some way (summarize_every 0 is every exchange)
            return f"{owner}: '{key}' is {value!r}; read as {read!r}, as the reference package read it", read
        allowed = ", ".join(repr(c) for c in meta["choices"])
        return f"{owner}: '{key}' is {value!r}, not one of {allowed}; read as {read!r}", read
    choices = meta["choices"]
    if choices is None or value in choices:
        return None
    allowed = ", ".join(repr(c) for c in choices)
    spelt = as_spelt(value)
    if isinstance(spelt, str) and spelt in choices:  # "SQLite" is sqlite: what was meant, and no typo
        return f"{owner}: '{key}' is {value!r}, not one of {allowed}; read as {spelt!r}", spelt
    if meta["otherwise"] is not UNSET:
        read = meta["otherwise"]
        lost = ", kept in RAM only: lost at every restart" if key == "backend" and read == "memory" else ""
        meant = did_you_mean(str(value).lower(), [str(c) for c in choices])
        return f"{owner}: '{key}' is {value!r}, not one of {allowed}; read as {read!r}{lost}{meant}", read
    return None


def as_spelt(value: Any) -> Any:
    """A choice as it is read: in another case, or with spaces around it, it is the same value
    ("SQLite" is sqlite: what was meant, and no typo); anything but a str as it is."""
    return value.strip().lower() if isinstance(value, str) else value


def _build(cls: type[T], values: dict[str, Any], owner: str) -> T:
    """``cls(**values)``; the checks across keys (``__post_init__``) name the backend too."""
    try:
        return cls(**values)
    except ConfigError as exc:
        if str(exc).startswith(f"{owner}:"):
            raise
        raise ConfigError(f"{owner}: {exc}") from exc


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
            checked = _check_value(owner, key, value, field.metadata)
            _check_items(owner, key, checked, _item_kind(type(settings), name))
            return dataclasses.replace(settings, **{name: checked})  # type: ignore[type-var]
    raise AttributeError(f"{owner}: no setting {name!r}")


def check_config(cls: type, raw: Mapping[str, Any] | None, owner: str, extra_known: tuple[str, ...] = (),
                 check_settings: Callable[[Any], list[str]] | None = None) -> list[str]:
    """Every problem with ``raw`` as a list of messages, all at once (strict mode for ``check-config``):
    each bad value, the checks across keys and ``check_settings(settings)`` (the backend's own
    start-up checks) on the good values, then unknown keys."""
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        return [f"{owner}: config must be a dict, not {type(raw).__name__}"]
    values, errors, warnings = _checked_values(cls, raw, owner)
    problems = [str(e) for e in errors] + warnings
    settings: Any
    try:
        settings = _build(cls, values, owner)  # the bad values left out: their defaults stand in
    except ConfigError as exc:
        problems.append(str(exc))
        settings = _unchecked(cls, values)  # the backend's own checks still run, on the same values
    problems += [f"{owner}: {p}" for p in (check_settings(settings) if check_settings else [])]
    return problems + [f"{owner}: {p}" for p in unknown_keys(cls, raw, extra_known)]


def _unchecked(cls: type, values: dict[str, Any]) -> Any:
    """An instance of the config dataclass without its ``__post_init__`` checks (for check_config only)."""
    settings: Any = object.__new__(cls)
    for field in dataclasses.fields(cls):
        if field.name in values:
            value = values[field.name]
        elif field.default is not dataclasses.MISSING:
            value = field.default
        else:
            value = field.default_factory()  # type: ignore[misc,operator]
        object.__setattr__(settings, field.name, value)
    return settings
