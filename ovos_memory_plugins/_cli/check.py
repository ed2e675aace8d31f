"""``ovos-memory check-config``: validate a persona file, or one plugin's block, strictly."""
from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .._core.loading import did_you_mean
from .._core.paths import is_memory_path, resolve_path
from ..errors import ConfigError, MissingDependencyError, StorageError, StoreUnavailable
from ..storage.postgres import is_postgres_url, probe, redact
from ..storage.windows import safe_table_name
from .blocks import config_blocks, store_files
from .commands import fragment_hint, read_json
from .output import EXIT_INPUT, UI, CLIError, Text, escape
from .persona import memory_class, parse_persona, persona_endpoint

__all__ = ["cmd_check_config", "config_problems"]


def cmd_check_config(args: argparse.Namespace, ui: UI) -> int:
    from .engine import find_endpoint

    twice: list[str] = []
    data = _given_config(args.file, _noting_keys_given_twice(twice))
    problems = [f"key {key!r} is given twice in one object: JSON keeps only the last one, the first is ignored"
                for key in dict.fromkeys(twice)]
    notes: list[str] = []
    chat_endpoint = None
    module: str | None
    block_alone = None if args.module else _memory_block_alone(data)
    if block_alone:
        module, block = block_alone, dict(data[block_alone])
        notes.append(f"no 'memory_module': checked as the block of '{block_alone}' only")
    elif isinstance(data, Mapping) and not args.module:
        fragment = _memory_part_only(data)
        persona = parse_persona({**data, "handlers": ["-"]} if fragment else data, path=args.file)
        module, block = persona.memory_module, dict(persona.memory_config)
        chat_endpoint = persona_endpoint(persona)
        found = None if fragment else find_endpoint(persona.handlers, persona.data)
        if fragment:
            notes.append("no 'name' or 'handlers': checked as the memory part of a persona only")
        elif found is None:
            notes.append(f"no OpenAI-compatible handler in {list(persona.handlers)}: 'ovos-memory chat' cannot use it")
        elif module and not found[1].get("allow_system_prompts"):
            notes.append(f"'{found[0]}' has allow_system_prompts off: memory injected as system messages is dropped")
        unused = unused_memory_blocks(data, module)
        notes += [why for why, installed in unused if installed]
        problems += [why for why, installed in unused if not installed] + _misspelt_memory_module(data)
    elif args.module:
        module, block = args.module, data
        if not isinstance(block, Mapping):
            raise CLIError(f"{args.file!r} must hold a JSON object")
    else:
        raise CLIError(f"{args.file!r} must hold a JSON object")
    if module is None:
        ui.out.print("memory is disabled (memory_module is null): nothing to check")
        return 0
    problems += config_problems(module, block)
    problems += _foreign_files(module, block) + _unwritable_files(module, block) if not problems else []
    databases = _database_checks(module, block) if not problems else ([], [])
    problems += databases[0]
    for note in notes:
        ui.err.print(f"[yellow]note:[/yellow] {escape(note)}")
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_INPUT
    warnings = (_mismatched_keys(module, block) + _silent_endpoints(module, block, chat_endpoint)
                + _unanswered_endpoints(module, block) + databases[1] + _stood_in(module, block)
                + _remembers_nothing(module, block))
    for warning in warnings:
        ui.err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    if warnings:
        ui.out.print(Text(f"the '{module}' config is valid, but it may not do what you want (see the warnings above)"))
        return 0
    ui.out.print(Text(f"OK: the '{module}' config is valid"))
    return 0


def _given_config(text: str, hook: Callable[[list[tuple[str, Any]]], dict[str, Any]]) -> Any:
    """The JSON of FILE.json: a file's, or the text itself when it is inline JSON (as ``--config``
    takes it) and names no file."""
    if text.lstrip().startswith(("{", "[", '"')) and not os.path.exists(text):
        try:
            return json.loads(text, object_pairs_hook=hook)
        except ValueError as exc:
            raise CLIError(f"the config given inline is not valid JSON: {exc}{fragment_hint(exc)}") from None
        except RecursionError:
            raise CLIError("the config given inline is nested too deeply to read") from None
    return read_json(text, "config file", hook)


def _memory_block_alone(data: Any) -> str | None:
    """The memory plugin whose block ``data`` is alone (``{"ovos-memory-plugin-composite": {...}}``,
    as documentation shows a block), or None: checked as that block, not as a persona."""
    if not isinstance(data, Mapping) or len(data) != 1:
        return None
    name, block = next(iter(data.items()))
    return name if name.startswith("ovos-memory-plugin-") and isinstance(block, Mapping) else None


def _memory_part_only(data: Mapping[str, Any]) -> bool:
    """Whether ``data`` is a persona's memory part alone, as documentation shows one: a
    ``memory_module`` (and its block), no name and no handlers."""
    return "memory_module" in data and not any(key in data for key in ("name", "handlers", "solvers"))


def _noting_keys_given_twice(twice: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A JSON object hook that appends to ``twice`` each key given twice in one object: JSON keeps
    the last one without a word, so a person listed twice in ``people`` loses the first entry's devices."""
    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        twice.extend(key for i, key in enumerate(keys) if key in keys[:i])
        return dict(pairs)

    return build


#: Seconds check-config waits for an endpoint to list its models.
PROBE_TIMEOUT_S = 2.0


def _silent_endpoints(module: str, block: Mapping[str, Any], chat_endpoint: Mapping[str, str] | None) -> list[str]:
    """A warning for each member that calls a model and is left on the default endpoint, when
    nothing answers there: it would run on its offline fallback while the config reads "OK"."""
    from .._llm.endpoint import DEFAULT_API_URL

    out: list[str] = []
    left = [name for name, config in _llm_members(module, block, {}) if "api_url" not in config]
    if not left or _answers(DEFAULT_API_URL):  # each chose its endpoint, or a model server answers at the default
        return out
    for name in left:
        if chat_endpoint:  # 'ovos-memory chat' lends the memory its endpoint; ovos-persona does not
            out.append(f"{name} calls a model but sets no api_url: 'ovos-memory chat' gives it the persona's chat "
                       f"endpoint, but ovos-persona gives a memory only its own block, so there it would call the "
                       f"default {DEFAULT_API_URL}, which does not answer, and work without the model; set api_url "
                       "in the memory's block")
            continue
        out.append(f"{name} calls a model but sets no api_url: the default {DEFAULT_API_URL} does not answer, "
                   "so it works without the model (offline rules and summaries); set api_url to your model "
                   "server, or null to run offline on purpose")
    return out


def _unanswered_endpoints(module: str, block: Mapping[str, Any]) -> list[str]:
    """A warning for each ``api_url`` a member names where nothing answers now (or where the
    server answers under ``/v1`` only): it would work without the model until one does."""
    from .._llm.endpoint import DEFAULT_API_URL

    named: dict[str, list[str]] = {}
    for name, config in _llm_members(module, block, {}):
        url = config.get("api_url")
        if isinstance(url, str) and url.strip() and url != DEFAULT_API_URL:
            named.setdefault(url, []).append(name)
    out = []
    for url, names in named.items():
        status = _listing_status(url)
        who = ", ".join(names) + (" calls" if len(names) == 1 else " call")
        if status is None:
            out.append(f"{who} a model at {url}, which does not answer now: "
                       f"{'it works' if len(names) == 1 else 'they work'} without the model (offline rules and "
                       "summaries) until it does")
        elif status == 404 and not url.rstrip("/").endswith("/v1") and _listing_status(url.rstrip("/") + "/v1") == 200:
            out.append(f"{who} a model at {url}, but the server answers at {url.rstrip('/')}/v1: "
                       "an OpenAI-compatible api_url ends with /v1")
    return out


def _remembers_nothing(module: str, block: Mapping[str, Any]) -> list[str]:
    """A composite with no member: it passes the turn through and remembers nothing."""
    if module != "ovos-memory-plugin-composite" or block.get("preset") or block.get("members"):
        return []
    return ["the composite has no members and no preset: it passes each turn through and remembers nothing; "
            "add \"preset\": \"hybrid\", or list its members"]


def _unwritable_files(module: str, block: Mapping[str, Any]) -> list[str]:
    """A store file, or ``data_dir``, in a folder nothing can be written to (a read-only mount,
    another user's folder): the memory would fail to start, or a composite run without it."""
    folders = [os.path.dirname(path) for path, _ in store_files(module, block)]
    folders += [resolve_path(str(config["data_dir"]), folder=True) for _, config, _ in config_blocks(module, block)
                if isinstance(config.get("data_dir"), str) and config["data_dir"].strip()]
    out = []
    for folder in dict.fromkeys(folders):
        existing = folder
        while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)  # the folders still to be made are made in the first that is
        if not os.access(existing, os.W_OK | os.X_OK):
            out.append(f"{folder}: nothing can be written in {existing} (a read-only file system, or not your "
                       "folder): the memory cannot keep its store there; name a writable folder")
    return out


def _foreign_files(module: str, block: Mapping[str, Any]) -> list[str]:
    """A ``db_path`` naming a file that holds neither an SQLite database nor JSON (a note, a
    model, a log): the store would refuse it at start, and a composite would run without it.
    The file is judged as a store judges it, read-only: nothing is created or set aside."""
    from ..storage import backend_for
    from ..storage.readonly import read_only

    out = []
    for _, config, where in config_blocks(module, block):
        path = config.get("db_path")
        if isinstance(path, str) and path.strip():
            try:
                with read_only():
                    backend_for(path, None)
            except ConfigError as exc:
                out.append(f"{where}{exc}")
    return out


def _mismatched_keys(module: str, block: Mapping[str, Any], where: str = "") -> list[str]:
    """Keys that are valid alone but do nothing together: people without ``scope: person`` (each
    session keeps a memory of its own), the reverse, and a preset beside listed members."""
    out = []
    people, scope = block.get("people"), block.get("scope")
    if people and scope != "person":
        out.append(f"{where}'people' is set but 'scope' is {scope or 'session'!r}: sessions are not mapped to "
                   'people, each keeps a memory of its own; add "scope": "person"')
    if scope == "person" and not people:
        out.append(f"{where}'scope' is 'person' without 'people': every session keeps a memory of its own, as in "
                   'scope \'session\'; add "people", e.g. {"me": ["*"]}')
    if module == "ovos-memory-plugin-composite" and block.get("preset") and block.get("members"):
        out.append(f"{where}'preset' {block['preset']!r} is not used, as 'members' is given: the preset's members "
                   "and settings (score fusion, max_added_tokens, the context's dates and header) are off; leave "
                   "'members' out, and give the preset a folder of its own with 'data_dir'")
    return out


def _database_checks(module: str, block: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(problems, warnings)`` of every PostgreSQL ``db_url`` the config names, each connected to
    once: one the server refuses (no such database or user, a password refused, a setting it does
    not know) is a problem, as no retry fixes it; one that cannot be reached now is a warning (a
    server still starting: the memory waits for it)."""
    from .._redis.store import probe as probe_redis

    problems, warnings = [], []
    servers: list[tuple[str, Callable[[str, float], None]]] = [
        (url, probe) for url in dict.fromkeys(_db_urls(module, block))]
    servers += [(url, probe_redis) for url in dict.fromkeys(_redis_urls(module, block))]
    for url, probe_server in servers:
        try:
            probe_server(url, PROBE_TIMEOUT_S)
        except StoreUnavailable as exc:
            warnings.append(f"{exc} (now: the persona's memory would answer from what is said after it starts, and "
                            "catch up once the server answers)")
        except MissingDependencyError as exc:
            problems.append(f"db_url {redact(url)}: {exc}" if probe_server is probe else str(exc))
        except (ConfigError, StorageError) as exc:
            problems.append(str(exc))
    return problems, warnings


def _stood_in(module: str, block: Mapping[str, Any]) -> list[str]:
    """The reference's local-rag plugins named and not installed (its members' included): the
    built-in ones stand in, which the persona's file does not say."""
    from ..local_rag import stood_in_plugins

    return [where + said for name, config, where in config_blocks(module, block)
            if name == "ovos-memory-plugin-local-rag" for said in stood_in_plugins(config)]


def _redis_urls(module: str, block: Mapping[str, Any]) -> list[str]:
    """The Redis servers a memory's config names (its members' included; the default server
    when a redis memory names none)."""
    configs = [config for name, config, _ in config_blocks(module, block) if name == "ovos-memory-plugin-redis"]
    if not configs:
        return []
    from ..redis_memory import RedisConfig

    return [str(config.get("url") or config.get("redis_url") or RedisConfig.url) for config in configs]


def _db_urls(module: str, block: Mapping[str, Any]) -> list[str]:
    """The PostgreSQL URLs a memory's config names (``db_url``, or a ``db_path`` holding one), its
    members' included."""
    return [str(v) for _, config, _ in config_blocks(module, block)
            for v in (config.get("db_url"), config.get("db_path")) if is_postgres_url(v)]


def _llm_members(module: str, block: Mapping[str, Any], inherited: Mapping[str, Any],
                 where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """``(name, config)`` of every member that calls a model, with the endpoint keys a composite passes down."""
    from .._core.loading import reads_key
    from ..composite import ENDPOINT_KEYS, HYBRID_PRESET

    cls = memory_class(module)
    if cls is None:
        return []
    config = {**{k: v for k, v in inherited.items() if reads_key(cls, k, third_party=False)}, **block}
    if module == "ovos-memory-plugin-composite":
        passed = {k: config[k] for k in ENDPOINT_KEYS if k in config}
        out = []
        listed = block.get("members") or []
        specs = listed or (list(HYBRID_PRESET) if block.get("preset") == "hybrid" else [])
        for i, spec in enumerate(specs):
            name, member = (spec, {}) if isinstance(spec, str) else (str(spec.get("module", "")),
                                                                      dict(spec.get("config") or {}))
            out += _llm_members(name, member, passed, f"{where}{f'members[{i}]' if listed else 'the preset'} ")
        return out
    return [(f"{where}'{module}'", config)] if reads_key(cls, "api_url", third_party=False) else []


def _answers(api_url: str) -> bool:
    return _listing_status(api_url) is not None  # any answer: the model listing is optional


def _listing_status(api_url: str) -> int | None:
    """The HTTP status of ``api_url``'s model listing, or None when nothing answers there."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(api_url.rstrip("/") + "/models", timeout=PROBE_TIMEOUT_S) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def config_problems(module: str, block: Mapping[str, Any], where: str = "") -> list[str]:
    """Every problem the plugin would raise when it starts with ``block``, all at once."""
    from ..config import check_config

    cls = memory_class(module)
    if cls is None:
        return [f"{where}memory plugin '{module}' is not installed{did_you_mean(module)}"]
    config_cls = getattr(cls, "Config", None)
    if config_cls is None:
        return []  # a third-party plugin without a typed config: nothing to check against
    problems = [where + p for p in check_config(config_cls, block, module, getattr(cls, "extra_config_keys", ()),
                                                 getattr(cls, "check_settings", None))]
    if module == "ovos-memory-plugin-composite":
        problems += [where + p for p in _unknown_primary(block)]
    if module == "ovos-memory-plugin-local-rag" and not problems:  # its plugins load off the turn: said here
        from ..local_rag import missing_plugins

        problems += [where + p for p in missing_plugins(block)]
    if module == "ovos-memory-plugin-composite" and isinstance(block.get("members"), list):
        problems += [where + p for p in _member_clashes(block["members"])]
        for i, spec in enumerate(block["members"]):
            if isinstance(spec, str):
                problems += config_problems(spec, {}, f"{where}members[{i}] ")
            elif isinstance(spec, Mapping) and isinstance(spec.get("config") or {}, Mapping):
                problems += config_problems(str(spec.get("module", "")), spec.get("config") or {},
                                         f"{where}members[{i}] ")
    return problems


#: The keys that decide which store (and which part of it) a member writes.
_STORE_KEYS = ("db_path", "db_url", "backend", "table", "collection")


def _unknown_primary(block: Mapping[str, Any]) -> list[str]:
    """A ``primary`` naming no member (a typo): the composite would take the first member's window."""
    from ..composite import HYBRID_PRESET, member_name

    wanted, members = block.get("primary"), block.get("members")
    if not isinstance(wanted, str) or not wanted:
        return []  # a wrong type is the config check's
    if not members and block.get("preset") == "hybrid":
        members = list(HYBRID_PRESET)
    if not isinstance(members, list) or not members:
        return []
    names: list[str] = []
    for spec in members:
        module = spec if isinstance(spec, str) else spec.get("module") if isinstance(spec, Mapping) else None
        if isinstance(module, str):
            names.append(member_name(module, names))
    if wanted in names:
        return []
    return [f"'primary' is {wanted!r}, which names no member (members: {', '.join(names)}); the first member's "
            "window would be used"]


def _member_clashes(members: list[Any]) -> list[str]:
    """Members the composite skips at start: itself, and a second member of one module on the
    same store (both on the defaults, or the same db_path and table)."""
    problems: list[str] = []
    seen: dict[tuple[str, ...], int] = {}
    for i, spec in enumerate(members):
        module = spec if isinstance(spec, str) else spec.get("module") if isinstance(spec, Mapping) else None
        config = spec.get("config") or {} if isinstance(spec, Mapping) else {}
        if not isinstance(module, str) or not isinstance(config, Mapping):
            continue  # reported by the member checks
        if module == "ovos-memory-plugin-composite" and not config.get("members"):
            problems.append(f"members[{i}] is the composite itself; it would be skipped")
            continue
        store = (module, *(repr(_store_value(key, config.get(key))) for key in _STORE_KEYS))
        if store in seen:
            problems.append(f"members[{i}] would write the same store as members[{seen[store]}] ({module}); "
                            "it would be skipped: give it a db_path (or table) of its own")
        seen.setdefault(store, i)
    return problems


def _store_value(key: str, value: Any) -> Any:
    """A store key's value as the stores read it: ``db_path`` resolved (``lex.db`` and
    ``~/.local/share/ovos/lex.db`` are one file), a table as named (SQLite and PostgreSQL read
    "Lex" and "lex" as one)."""
    if not isinstance(value, str):
        return value
    if key == "table":
        return safe_table_name(value).lower()
    if key == "db_path" and value.strip() and not is_memory_path(value) and not is_postgres_url(value):
        try:
            return resolve_path(value)
        except ConfigError:
            return value  # reported by the member's own checks
    return value


def unused_memory_blocks(data: Mapping[str, Any], module: str | None) -> list[tuple[str, bool]]:
    """``(why, installed)`` for each block named like a memory plugin that configures nothing. One
    for a plugin that is installed is a note (a block kept for another memory); one for no
    installed plugin is a misspelt block name, leaving the memory on its defaults without a word."""
    from .._core.loading import MEMORY_GROUP, installed_plugins

    installed = set(installed_plugins(MEMORY_GROUP))
    return [(f"the '{key}' block configures nothing (memory_module is {module!r})"
             + ("" if key in installed else did_you_mean(key)), key in installed)
            for key, value in data.items()
            if key != module and key.startswith("ovos-memory-plugin") and isinstance(value, Mapping)]


def _misspelt_memory_module(data: Mapping[str, Any]) -> list[str]:
    """A key spelt almost as ``memory_module``: the persona would run on the default memory."""
    return [f"unknown persona key '{key}'; did you mean 'memory_module'? (without it the persona uses the "
            "default memory)" for key in data
            if key != "memory_module" and difflib.get_close_matches(key, ["memory_module"], n=1, cutoff=0.8)]
