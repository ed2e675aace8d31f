"""``ovos-memory``: see, try and manage what a persona remembers.

::

    ovos-memory demo                                   # scripted conversation, no network, no LLM
    ovos-memory chat --persona assistant.json          # talk to the persona's OpenAI-compatible endpoint
    ovos-memory ask --persona assistant.json "what is my dog called?"   # reads memory, records nothing
    ovos-memory sessions --persona assistant.json      # also: show, search, forget, export, import, stats
    ovos-memory check-config assistant.json
    ovos-memory plugins

Every failure is one line on stderr naming the problem, and a non-zero exit status
(2: bad input or config, 3: the chat endpoint failed, 4: no such session, 1: anything else).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from ._cli_chat import cmd_ask, cmd_chat, cmd_demo
from ._cli_output import (
    EXIT_ENDPOINT,
    EXIT_ERROR,
    EXIT_INPUT,
    EXIT_NO_SESSION,
    UI,
    CLIError,
    Text,
    count_items,
    escape,
    logs_to_stderr,
)
from ._persona import PersonaError, load_persona, memory_class, open_memory, parse_persona
from .errors import ConfigError, LLMError, MemoryPluginError

__all__ = ["CLIError", "build_parser", "main"]


# -- helpers ---------------------------------------------------------------------------------
def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise CLIError(f"{what} {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read {what} {path!r}: {exc}") from None
    except ValueError as exc:
        raise CLIError(f"{what} {path!r} is not valid JSON: {exc}") from None


def _config_arg(text: str | None) -> dict[str, Any]:
    """``--config``: inline JSON, or the path of a JSON file."""
    if not text:
        return {}
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise CLIError(f"--config is not valid JSON: {exc}") from None
    else:
        value = _read_json(text, "config file")
    if not isinstance(value, dict):
        raise CLIError("--config must be a JSON object")
    return value


def _backend_spec(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    if args.persona:
        persona = load_persona(args.persona)
        if persona.memory_module is None:
            raise CLIError(f"persona {persona.name!r} has no memory ('memory_module' is null)")
        return persona.memory_module, dict(persona.memory_config)
    if args.module:
        return args.module, _config_arg(args.config)
    raise CLIError("say which memory: --persona FILE.json, or --module NAME [--config JSON]")


@contextlib.contextmanager
def _backend(args: argparse.Namespace) -> Iterator[Any]:
    module, config = _backend_spec(args)
    try:
        memory = open_memory(module, config)
    except MemoryPluginError:
        raise
    except Exception as exc:  # noqa: BLE001 - a third-party constructor may raise anything
        raise CLIError(f"memory plugin '{module}' failed to start: {type(exc).__name__}: {exc}", EXIT_ERROR) from None
    try:
        yield memory
    finally:
        if callable(getattr(memory, "close", None)):
            memory.close()


def _sessions(memory: Any) -> list[str] | None:
    """The memory's sessions, or None when it cannot list them (a third-party plugin)."""
    fn = getattr(memory, "sessions", None)
    return list(fn()) if callable(fn) else None


def _require_session(memory: Any, session_id: str) -> None:
    known = _sessions(memory)
    if known is not None and session_id not in known:
        name = getattr(memory, "plugin_name", type(memory).__name__)
        raise CLIError(f"no session {session_id!r} in {name} (see 'ovos-memory sessions')", EXIT_NO_SESSION)


def _short(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


# -- management commands ---------------------------------------------------------------------
def cmd_sessions(args: argparse.Namespace, ui: UI) -> int:
    with _backend(args) as memory:
        found = _sessions(memory)
        if found is None:
            raise CLIError(f"{type(memory).__name__} cannot list its sessions", EXIT_ERROR)
        for sid in found:
            ui.write(sid + "\n")
        if not found:
            ui.err.print("no sessions")
    return 0


def cmd_show(args: argparse.Namespace, ui: UI) -> int:
    from rich.table import Table

    with _backend(args) as memory:
        _require_session(memory, args.session)
        table = Table(title=f"session {args.session!r}: verbatim window", show_lines=False)
        table.add_column("role", style="bold")
        table.add_column("content")
        from .messages import role_of

        for msg in memory.get_history(args.session):
            table.add_row(role_of(msg), Text(msg.content))
        ui.out.print(table)
        data = memory.export(args.session) if callable(getattr(memory, "export", None)) else {}
        for label, value in _highlights(data):
            ui.out.print(f"[bold]{escape(label)}[/bold]\n{escape(value)}")
    return 0


def _highlights(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """Summary, facts and document counts from an export (members of a composite included)."""
    for name, member in (data.get("members") or {}).items():
        yield from _highlights(member, f"{name}: ")
    if data.get("summary"):
        yield f"{prefix}summary", str(data["summary"])
    facts = data.get("facts") or []
    if facts:
        yield f"{prefix}facts", "\n".join(f"- {f.get('text') if isinstance(f, Mapping) else f}" for f in facts)
    docs = data.get("documents") or []
    if docs:
        yield f"{prefix}documents", f"{len(docs)} stored for recall"


def cmd_search(args: argparse.Namespace, ui: UI) -> int:
    from rich.table import Table

    with _backend(args) as memory:
        if not callable(getattr(memory, "search", None)):
            raise CLIError(f"{getattr(memory, 'plugin_name', type(memory).__name__)} does not search "
                           "(it is not a retriever); try lexical, local-rag or composite")
        if args.session:
            _require_session(memory, args.session)
        hits = memory.search(args.query, args.session, top_k=args.k)
        table = Table(title=f"{len(hits)} hit(s) for {args.query!r}")
        for col in ("#", "score", "session", "from", "content"):
            table.add_column(col)
        for i, hit in enumerate(hits, 1):
            score = hit.metadata.get("fusion_score", hit.score)
            table.add_row(str(i), f"{score:.3f}", Text(str(hit.metadata.get("session_id", ""))),
                          str(hit.metadata.get("retriever", "")).replace("ovos-memory-plugin-", ""), Text(hit.content))
        ui.out.print(table)
    return 0



def cmd_forget(args: argparse.Namespace, ui: UI) -> int:
    with _backend(args) as memory:
        _require_session(memory, args.session)
        counts = memory.forget(args.session)
        lines = [f"forgot session {args.session!r}: {count_items(counts)} item(s) deleted"]
        for key, value in (counts or {}).items():
            if isinstance(value, Mapping):
                detail = ", ".join(f"{k} {v}" for k, v in value.items()) or "nothing"
                lines.append(f"  {key}: {detail}")
            else:
                lines.append(f"  {key}: {value}")
        ui.out.print(Text("\n".join(lines)))
    return 0


def cmd_export(args: argparse.Namespace, ui: UI) -> int:
    with _backend(args) as memory:
        if args.all:
            data: dict[str, Any] = {"plugin": getattr(memory, "plugin_name", ""),
                                    "sessions": [memory.export(s) for s in (_sessions(memory) or [])]}
        else:
            if not args.session:
                raise CLIError("export needs a SESSION (or --all)")
            _require_session(memory, args.session)
            data = memory.export(args.session)
        ui.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    return 0


def _import_items(data: Any, path: str, every: bool = False) -> list[Mapping[str, Any]]:
    """The session exports in a file: ``{"sessions": [...]}`` (export --all), a list, or one session.

    ``every`` (import --all) insists on the export --all shape, so a single-session file given
    by mistake is an error rather than a quiet import of one session.
    """
    whole = isinstance(data, Mapping) and "sessions" in data
    if every and not (whole or isinstance(data, list)):
        raise CLIError(f"{path!r} is a one-session export, not every session (as 'export --all' writes); "
                       "drop --all to import it")
    items = data.get("sessions") if whole else data
    items = items if isinstance(items, list) else [items]
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not item.get("session_id"):
            raise CLIError(f"{path!r}: item {i} is not a session export (no 'session_id')")
    return items


def cmd_import(args: argparse.Namespace, ui: UI) -> int:
    from rich.progress import Progress

    if args.all and args.session:
        raise CLIError("--session only applies to a file holding one session, not --all")
    items = _import_items(_read_json(args.file, "export file"), args.file, args.all)
    if args.session and len(items) != 1:
        raise CLIError("--session only applies to a file holding one session")
    with _backend(args) as memory:
        name = getattr(memory, "plugin_name", "")
        for item in items:
            if item.get("plugin") and name and item["plugin"] != name:
                ui.err.print(f"[yellow]warning:[/yellow] session {escape(repr(item['session_id']))} was exported "
                             f"from {escape(str(item['plugin']))}, importing into {name}")
        with Progress(console=ui.err, transient=True) as progress:
            task = progress.add_task("importing", total=len(items))
            for item in items:
                memory.import_session(item, args.session)
                progress.advance(task)
            progress.add_task("indexing", total=None)
            memory.flush(600)
        ui.out.print(f"imported {len(items)} session(s) into {name or type(memory).__name__}")
    return 0


def cmd_stats(args: argparse.Namespace, ui: UI) -> int:
    from rich.table import Table

    with _backend(args) as memory:
        found = _sessions(memory) or []
        table = Table(title=f"{getattr(memory, 'plugin_name', type(memory).__name__)}: {len(found)} session(s)")
        for col in ("session", "window", "documents", "facts", "summary"):
            table.add_column(col, justify="left" if col == "session" else "right")
        totals = [0, 0, 0, 0]
        for sid in found[: args.limit]:
            data = memory.export(sid) if callable(getattr(memory, "export", None)) else {}
            row = [len(memory.get_history(sid)), *_tally(data)]
            totals = [a + b for a, b in zip(totals, row)]
            table.add_row(Text(sid), *(str(v) for v in row))
        if len(found) > args.limit:
            table.caption = f"first {args.limit} sessions shown (--limit)"
        if found:
            table.add_row("[bold]total[/bold]", *(f"[bold]{v}[/bold]" for v in totals))
        ui.out.print(table)
    return 0


def _tally(data: Mapping[str, Any]) -> tuple[int, int, int]:
    docs, facts = len(data.get("documents") or []), len(data.get("facts") or [])
    summary = int(bool(data.get("summary")))
    for member in (data.get("members") or {}).values():
        d, f, s = _tally(member)
        docs, facts, summary = docs + d, facts + f, summary + s
    return docs, facts, summary


def cmd_check_config(args: argparse.Namespace, ui: UI) -> int:
    from ._chat import find_endpoint

    data = _read_json(args.file, "config file")
    problems: list[str] = []
    notes: list[str] = []
    if isinstance(data, Mapping) and not args.module:
        persona = parse_persona(data, path=args.file)
        module, block = persona.memory_module, dict(persona.memory_config)
        found = find_endpoint(persona.handlers, persona.data)
        if found is None:
            notes.append(f"no OpenAI-compatible handler in {list(persona.handlers)}: 'ovos-memory chat' cannot use it")
        elif module and not found[1].get("allow_system_prompts"):
            notes.append(f"'{found[0]}' has allow_system_prompts off: memory injected as system messages is dropped")
    elif args.module:
        module, block = args.module, data
        if not isinstance(block, Mapping):
            raise CLIError(f"{args.file!r} must hold a JSON object")
    else:
        raise CLIError(f"{args.file!r} must hold a JSON object")
    if module is None:
        ui.out.print("memory is disabled (memory_module is null): nothing to check")
        return 0
    problems += _check_block(module, block)
    for note in notes:
        ui.err.print(f"[yellow]note:[/yellow] {escape(note)}")
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_INPUT
    ui.out.print(Text(f"OK: the '{module}' config is valid"))
    return 0


def _check_block(module: str, block: Mapping[str, Any], where: str = "") -> list[str]:
    from .config import check_config

    cls = memory_class(module)
    if cls is None:
        return [f"{where}memory plugin '{module}' is not installed"]
    config_cls = getattr(cls, "Config", None)
    if config_cls is None:
        return []  # a third-party plugin without a typed config: nothing to check against
    problems = [where + p for p in check_config(config_cls, block, module, getattr(cls, "extra_config_keys", ()))]
    if module == "ovos-memory-plugin-composite" and not problems:
        for i, spec in enumerate(block.get("members") or []):
            name = spec if isinstance(spec, str) else spec.get("module", "")
            config = {} if isinstance(spec, str) else (spec.get("config") or {})
            problems += _check_block(name, config, f"members[{i}] ")
    return problems


def cmd_plugins(args: argparse.Namespace, ui: UI) -> int:
    import importlib.metadata

    from rich.table import Table

    from ._persona import OUR_SHORT_TERM, PERSONA_DEFAULT_MEMORY
    from ._plugins import MEMORY_GROUP

    table = Table(title="installed memory plugins (opm.agents.memory)")
    table.add_column("name", no_wrap=True)
    table.add_column("package", overflow="fold")
    table.add_column("class", overflow="fold")
    eps = sorted(importlib.metadata.entry_points(group=MEMORY_GROUP), key=lambda e: e.name)
    names = {ep.name for ep in eps}
    for ep in eps:
        dist = ep.dist.name if ep.dist else ""
        table.add_row(Text(ep.name), Text(dist), Text(ep.value))
    if PERSONA_DEFAULT_MEMORY not in names:
        table.caption = f"{PERSONA_DEFAULT_MEMORY} (the persona default) is served by {OUR_SHORT_TERM}"
    ui.out.print(table)
    return 0


def cmd_docs_table(args: argparse.Namespace, ui: UI) -> int:
    from ._docs import config_table

    ui.write(config_table(args.entry_point) + "\n")
    return 0


# -- parser ------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ovos-memory", description="See, try and manage what an OVOS persona "
                                                                     "remembers.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (INFO), show full contexts")
    parser.add_argument("--debug", action="store_true", help="log everything and show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # -v and --debug also work after the command (SUPPRESS: an absent flag keeps the global value).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    real_add = sub.add_parser

    def add_parser(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", []), common]
        return real_add(name, **kwargs)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    backend = argparse.ArgumentParser(add_help=False)
    which = backend.add_argument_group("which memory")
    which.add_argument("--persona", metavar="FILE.json", help="use this persona's memory_module and its block")
    which.add_argument("--module", metavar="NAME", help="memory plugin entry point (ovos-memory-plugin-...)")
    which.add_argument("--config", metavar="JSON", help="config for --module: inline JSON or a JSON file")

    persona = argparse.ArgumentParser(add_help=False)
    persona.add_argument("--persona", metavar="FILE.json", required=True, help="persona JSON file")
    persona.add_argument("--session", default="default", help="session id (default: %(default)s)")
    persona.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default: %(default)s)")

    p = sub.add_parser("demo", help="scripted multi-session conversation on the embedded defaults (offline)")
    p.add_argument("--data-dir", help="keep the demo's memory files here (default: a temporary folder)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("chat", parents=[persona], help="chat with a persona through its OpenAI-compatible endpoint")
    p.add_argument("--no-stream", action="store_true", help="wait for whole answers instead of streaming")
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("ask", parents=[persona], help="one question; reads memory, records nothing")
    p.add_argument("question")
    p.add_argument("--show-context", action="store_true", help="print what the memory injects (stderr)")
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("sessions", parents=[backend], help="list session ids")
    p.set_defaults(func=cmd_sessions)
    p = sub.add_parser("show", parents=[backend], help="show a session's window, facts and summary")
    p.add_argument("session")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("search", parents=[backend], help="what the memory would recall for a query")
    p.add_argument("query")
    p.add_argument("--session", help="only this session (as the memory's scope allows)")
    p.add_argument("-k", type=int, default=5, help="hits (default: %(default)s)")
    p.set_defaults(func=cmd_search)
    p = sub.add_parser("forget", parents=[backend], help="delete everything of a session, report what")
    p.add_argument("session")
    p.set_defaults(func=cmd_forget)
    p = sub.add_parser("export", parents=[backend], help="a session as JSON on stdout")
    p.add_argument("session", nargs="?")
    p.add_argument("--all", action="store_true", help="every session, as {\"sessions\": [...]}")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("import", parents=[backend], help="load what export wrote")
    p.add_argument("file", metavar="FILE.json")
    p.add_argument("--session", help="import into this session id instead")
    p.add_argument("--all", action="store_true",
                   help="the file holds every session, as 'export --all' writes (checked); without it both shapes load")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("stats", parents=[backend], help="sessions and what each holds")
    p.add_argument("--limit", type=int, default=50, help="sessions listed (default: %(default)s)")
    p.set_defaults(func=cmd_stats)
    p = sub.add_parser("check-config", help="validate a persona file (or a block with --module); strict")
    p.add_argument("file", metavar="FILE.json")
    p.add_argument("--module", help="FILE.json is this plugin's config block, not a persona")
    p.set_defaults(func=cmd_check_config)
    p = sub.add_parser("plugins", help="list installed memory plugins")
    p.set_defaults(func=cmd_plugins)
    p = sub.add_parser("docs-table", help="Markdown table of a backend's config keys")
    p.add_argument("entry_point")
    p.set_defaults(func=cmd_docs_table)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The command reports what matters itself (one line per problem); library warnings would
    # repeat it, so only errors are logged unless asked for more.
    level = "DEBUG" if args.debug else "INFO" if args.verbose else "ERROR"
    try:
        with logs_to_stderr(level):
            return int(args.func(args, UI()))
    except CLIError as exc:
        code, message = exc.code, str(exc)
    except (PersonaError, ConfigError) as exc:
        code, message = EXIT_INPUT, str(exc)
    except LLMError as exc:
        code, message = EXIT_ENDPOINT, f"chat endpoint failed: {exc}"
    except MemoryPluginError as exc:
        code, message = EXIT_ERROR, str(exc)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_ERROR  # `ovos-memory export x | head`
    except Exception as exc:  # noqa: BLE001 - never a traceback for the user (--debug shows it)
        if args.debug:
            raise
        code, message = EXIT_ERROR, f"unexpected {type(exc).__name__}: {exc} (run with --debug for details)"
    print(f"ovos-memory: error: {' '.join(message.split())}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
