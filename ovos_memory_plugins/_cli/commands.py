"""The management commands of ``ovos-memory``: sessions, show, search, forget, export, import,
index, stats, plugins and docs-table. Each takes the parsed arguments and a :class:`UI`, returns an exit
status, and reports a failure as one :class:`CLIError` line."""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from .._memory.people import PERSON_PREFIX, inside, listed_as, listed_keys, move_sessions_of_people
from ..config import described
from ..errors import MemoryPluginError
from ..storage import read_only as storage_read_only
from .output import EXIT_ERROR, EXIT_INPUT, EXIT_NO_SESSION, UI, CLIError, Text, count_items, escape, printable
from .persona import load_persona, open_memory

__all__ = ["cmd_docs_table", "cmd_export", "cmd_forget", "cmd_import", "cmd_index", "cmd_plugins", "cmd_search",
           "cmd_sessions", "cmd_show", "cmd_stats", "read_json", "wait_for_index"]


# -- helpers ---------------------------------------------------------------------------------
def read_json(path: str, what: str, pairs: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """The JSON in ``path`` (read once: it may be a pipe), ``pairs`` building its objects."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=pairs)
    except FileNotFoundError:
        raise CLIError(f"{what} {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read {what} {path!r}: {exc}") from None
    except ValueError as exc:
        raise CLIError(f"{what} {path!r} is not valid JSON: {exc}{fragment_hint(exc)}") from None
    except RecursionError:
        raise CLIError(f"{what} {path!r} is nested too deeply to read") from None


def fragment_hint(exc: ValueError) -> str:
    """A hint for JSON that is an object's keys without its braces, as documentation shows a
    persona's memory part (``"memory_module": "...", "...": {...}``)."""
    doc = getattr(exc, "doc", "")
    return "; it reads as keys without their braces: wrap it in { }" if doc.lstrip().startswith('"') and \
        ":" in doc else ""


def _config_arg(text: str | None) -> dict[str, Any]:
    """``--config``: inline JSON, or the path of a JSON file."""
    if not text:
        return {}
    if text.lstrip().startswith(("{", "[")):  # inline JSON (a list is refused below, as a list)
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise CLIError(f"--config is not valid JSON: {exc}") from None
        except RecursionError:
            raise CLIError("--config is nested too deeply to read") from None
    else:
        value = read_json(text, "config file")
    if not isinstance(value, dict):
        raise CLIError("--config must be a JSON object")
    return value


def _backend_spec(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    if args.persona and (args.module or args.config):
        given = " and ".join(f"--{name}" for name in ("module", "config") if getattr(args, name))
        raise CLIError(f"--persona names the memory and its config: leave out {given}, or give --module "
                       "[--config] without --persona")
    if args.persona:
        persona = load_persona(args.persona)
        if persona.memory_module is None:
            raise CLIError(f"persona {persona.name!r} has no memory ('memory_module' is null)")
        if persona.memory_module not in persona.data:  # a misspelt block: the defaults' stores, not its own
            from .check import unused_memory_blocks

            misspelt = [why for why, installed in unused_memory_blocks(persona.data, persona.memory_module)
                        if not installed]
            if misspelt:
                raise CLIError(f"persona {persona.name!r}: {misspelt[0]}; the command would act on the memory's "
                               "default stores instead of the persona's")
        return persona.memory_module, dict(persona.memory_config)
    if args.module:
        config = _config_arg(args.config)
        if "memory_module" in config or isinstance(config.get(args.module), dict):
            # A persona file: its keys read as unknown keys of the memory, every setting ignored.
            raise CLIError(f"--config {args.config!r} is a persona file (it has "
                           f"{'memory_module' if 'memory_module' in config else repr(args.module)}), not a "
                           "memory's config: give it as --persona FILE instead", EXIT_INPUT)
        return args.module, config
    raise CLIError("say which memory: --persona FILE.json, or --module NAME [--config JSON]")


@contextlib.contextmanager
def _backend(args: argparse.Namespace, read_only: bool = False) -> Iterator[Any]:
    """The memory the arguments name; ``read_only``: its stores change no file (a command that
    only looks), and a file that is not a store is an error, never a store to start afresh."""
    if not read_only:
        _refuse_unknown_keys(args)
    # The commands name memories by what 'sessions' lists: a person's key ("person:alice") is one.
    with storage_read_only() if read_only else contextlib.nullcontext(), _opened(args) as memory, inside():
        yield memory


def _refuse_unknown_keys(args: argparse.Namespace) -> None:
    """A command that changes stores refuses a misspelt key in ``--config``: ``{"db_pth": ...}``
    would have it forget from or import into the memory's default store, not the one named."""
    from .check import config_problems

    if not args.module or args.persona:  # a persona's typo is the persona's: it uses those stores too
        return
    unknown = [p for p in config_problems(args.module, _config_arg(args.config)) if "unknown config key" in p]
    if unknown:
        raise CLIError(f"--config: {unknown[0]}; the command would change the stores the memory's defaults "
                       "name, not the ones you meant: fix the key")


@contextlib.contextmanager
def _opened(args: argparse.Namespace) -> Iterator[Any]:
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


def memory_named(memory: Any, session_id: str) -> str:
    """What a message calls the memory ``session_id`` writes to: "session 'kitchen'", or with
    ``scope: person`` "the memory of 'person:me' (session 'kitchen' is theirs)"."""
    key = memory.memory_key(session_id) if callable(getattr(memory, "memory_key", None)) else session_id
    return f"session {session_id!r}" if key == session_id else \
        f"the memory of {key!r} (session {session_id!r} is theirs)"


def _stored_key(memory: Any, session_id: str) -> str:
    """The key the stores hold ``session_id``'s memory under (use it inside ``listed_keys()``): the id
    itself when ``sessions`` lists it (a session stored under its own id is its own, even once its
    person's patterns claim it), else its person's key (``show kitchen`` shows Alice's memory)."""
    known = _sessions(memory)
    if known is not None and session_id in known:
        return session_id
    key = memory.memory_key(session_id) if callable(getattr(memory, "memory_key", None)) else session_id
    if known is not None and key not in known:
        name = getattr(memory, "plugin_name", type(memory).__name__)
        missing = _not_running(memory)
        if missing:  # its store may hold the session: "no session" would be a guess
            raise CLIError(f"no session {session_id!r} in the running members of {name}; {'; '.join(missing)}",
                           EXIT_ERROR)
        raise CLIError(f"no session {session_id!r} in {name} (see 'ovos-memory sessions')", EXIT_NO_SESSION)
    return key


def _not_running(memory: Any) -> list[str]:
    """The members of a composite that are not running and why (none when all run), for a
    listing that cannot include their sessions."""
    fn = getattr(memory, "not_started", None)
    members = fn() if callable(fn) else {}
    return [f"member {name} {why}: its sessions are not listed" for name, why in members.items()]


def _short(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


# -- management commands ---------------------------------------------------------------------
def cmd_sessions(args: argparse.Namespace, ui: UI) -> int:
    with _backend(args, read_only=True) as memory:
        found = _sessions(memory)
        if found is None:
            raise CLIError(f"{type(memory).__name__} cannot list its sessions", EXIT_ERROR)
        for sid in found:
            ui.write(printable(sid, lines=False) + "\n")  # one line each, whatever the id holds
        missing = _not_running(memory)
        for line in missing:  # one a line: a composite may have several
            ui.err.print(line)
        if not missing and not found:
            ui.err.print(escape(f"no sessions{_where_looked(args)}"))
    return 1 if missing else 0


def _where_looked(args: argparse.Namespace) -> str:
    """Where an empty listing looked, as the memory resolved the files its config names: a
    relative ``db_path`` is read under the data folder, not the current one."""
    from .blocks import store_files

    module, config = _backend_spec(args)
    files = store_files(module, config)
    if not files:
        return ""
    absent = [f for f, _ in files if not os.path.exists(f)]
    said = f": {', '.join(absent)} {'does' if len(absent) == 1 else 'do'} not exist" if absent else \
        f" in {', '.join(f for f, _ in files)}"
    relative = any(r for _, r in files)  # under the data folder, or a composite's data_dir
    return said + ("; a relative db_path is read under the memory's data folder, not the current one"
                   if relative else "")


def cmd_show(args: argparse.Namespace, ui: UI) -> int:
    from rich.table import Table

    with _backend(args, read_only=True) as memory:
        key = _stored_key(memory, args.session)
        table = Table(title=f"session {args.session!r}: verbatim window", show_lines=False)
        table.add_column("role", style="bold")
        table.add_column("content")
        from ..messages import role_of

        with listed_keys():
            history = memory.get_history(key)
            data = memory.export(key) if callable(getattr(memory, "export", None)) else {}
        for msg in history:
            table.add_row(role_of(msg), Text(msg.content))
        ui.out.print(table)
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

    if not args.query.strip():  # as the page's API: 0 hits would read as nothing remembered
        raise CLIError("search needs the words to search for (got an empty QUERY)")
    with _backend(args, read_only=True) as memory:
        if not callable(getattr(memory, "search", None)):
            raise CLIError(f"{getattr(memory, 'plugin_name', type(memory).__name__)} does not search "
                           "(it is not a retriever); try lexical, local-rag or composite")
        key = _stored_key(memory, args.session) if args.session is not None else None
        with listed_keys():
            hits = memory.search(args.query, key, top_k=args.k)
        table = Table(title=f"{len(hits)} hit(s) for {args.query!r}")
        for col in ("#", "score", "session", "from", "content"):
            table.add_column(col)
        for i, hit in enumerate(hits, 1):
            score = hit.metadata.get("fusion_score", hit.score)
            # 4 significant digits: a keyword score over a store of two documents is about 1e-6.
            table.add_row(str(i), f"{score:.4g}", Text(printable(str(hit.metadata.get("session_id", "")), lines=False)),
                          str(hit.metadata.get("retriever", "")).replace("ovos-memory-plugin-", ""),
                          Text(_shortened(hit.content)))
        ui.out.print(table)
    return 0



#: Characters of a hit's text shown by ``search`` (a pasted document would fill pages); export has all.
SHOWN_CHARS = 600


def _shortened(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text) - SHOWN_CHARS:,} more characters; 'export' shows all)"


def _person_of(memory: Any, key: str) -> str:
    """The person whose memory ``key`` is ("" for a guest's session)."""
    name = key.removeprefix(PERSON_PREFIX) if key.startswith(PERSON_PREFIX) else ""
    people = memory.people() if callable(getattr(memory, "people", None)) else []
    return name if name in people else ""


def _target(memory: Any, args: argparse.Namespace) -> tuple[str, str]:
    """``(session, what)`` the command acts on: ``--person NAME`` or a SESSION, checked."""
    if getattr(args, "person", None) is not None:
        if args.session is not None:
            raise CLIError("give a SESSION or --person, not both")
        people = list(memory.people()) if callable(getattr(memory, "people", None)) else []
        if args.person not in people:
            raise CLIError(f"no person {args.person!r} in this memory's 'people' (known: {', '.join(people) or 'none'};"
                           " people exist with scope 'person')", EXIT_NO_SESSION)
        return memory.memory_key(PERSON_PREFIX + args.person), f"person {args.person!r}"
    if args.session is None:  # "" is a session id too (the reference's default one)
        raise CLIError(f"{args.command} needs a SESSION or --person" + (" (or --all)" if "all" in args else ""))
    key = _stored_key(memory, args.session)
    person = _person_of(memory, key)
    return key, f"session {args.session!r}" + (f" (person {person!r})" if person else "")


def cmd_forget(args: argparse.Namespace, ui: UI) -> int:
    _no_such_target(args)
    with _backend(args) as memory:
        session, what = _target(memory, args)
        if getattr(args, "person", None):  # devices that stored before ``people`` named them are the person's
            move_sessions_of_people(memory)
        with listed_keys():
            counts = memory.forget(session)
        lines = [f"forgot {what}: {count_items(counts)} item(s) deleted"]
        for key, value in (counts or {}).items():
            if isinstance(value, Mapping):
                detail = ", ".join(f"{k} {v}" for k, v in value.items()) or "nothing"
                lines.append(f"  {key}: {detail}")
            else:
                lines.append(f"  {key}: {value}")
        ui.out.print(Text("\n".join(lines)))
    return 0


def _no_such_target(args: argparse.Namespace) -> None:
    """Say there is nothing to forget from a look that makes no store to say it. A store the look
    cannot open (one an older version wrote, which a write migrates; a damaged one, which a write
    sets aside) is left to the command's own open."""
    _refuse_unknown_keys(args)  # before the look: it would look in the default store
    try:
        with _backend(args, read_only=True) as memory:
            _target(memory, args)
    except CLIError as exc:
        if exc.code == EXIT_NO_SESSION:
            raise
    except Exception:  # noqa: BLE001 - see above: the writable open says what is wrong, if anything
        pass


def cmd_export(args: argparse.Namespace, ui: UI) -> int:
    if args.all and args.session is not None:
        raise CLIError(f"export takes a SESSION or --all, not both (got --all and {args.session!r})")
    with _backend(args, read_only=True) as memory:
        if args.all:
            with listed_keys():
                data: dict[str, Any] = {"plugin": getattr(memory, "plugin_name", ""),
                                        "sessions": [memory.export(s) for s in (_sessions(memory) or [])]}
        else:
            key = _target(memory, args)[0]
            with listed_keys():
                data = memory.export(key)
            if getattr(args, "person", None):
                _warn_unmoved(memory, key, args.person, ui)
        ui.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    return 0


def _warn_unmoved(memory: Any, key: str, person: str, ui: UI) -> None:
    """Name the sessions of ``person`` still stored under their own ids (``people`` claimed them
    after they stored; they move at the memory's next use, and an export only looks)."""
    if not callable(getattr(memory, "memory_key", None)) or _sessions(memory) is None:
        return
    apart = [s for s in listed_as(memory, key) if s != key]
    if apart:
        ui.err.print(Text(f"note: not in this export, stored under their own ids until the memory is next used: "
                          f"{', '.join(map(repr, apart))} (export each by its SESSION)"))


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
        # "" is a session id like any other ("session=" alone names it): its export comes back.
        if not isinstance(item, Mapping) or not isinstance(item.get("session_id"), str):
            why = "no 'session_id'" if not isinstance(item, Mapping) or "session_id" not in item else \
                f"its 'session_id' is {described(item['session_id'])}, not a string"
            raise CLIError(f"{path!r}: item {i} is not a session export ({why})")
    return items


def _past_exchanges(path: str) -> list[dict[str, Any]]:
    """``{"question", "answer", "ts"}`` items from a JSON list or JSON lines; ``ts`` in POSIX seconds
    or ISO 8601 (without a time zone: local time), as seconds."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise CLIError(f"exchanges file {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read exchanges file {path!r}: {exc}") from None
    _refuse_export(text, path)
    try:
        items = json.loads(text) if text.lstrip().startswith("[") else _json_lines(text)
    except ValueError as exc:
        raise CLIError(f"exchanges file {path!r} is neither a JSON list nor JSON lines: {exc}; nothing was "
                       "imported") from None
    except RecursionError:
        raise CLIError(f"exchanges file {path!r} is nested too deeply to read") from None
    out = []
    for i, item in enumerate(items, 1):  # as import_exchanges counts them: the first is exchange 1
        if isinstance(item, Mapping) and isinstance(item.get("ts"), str):
            try:
                when = datetime.datetime.fromisoformat(item["ts"].replace("Z", "+00:00"))
            except ValueError:
                raise CLIError(f"{path!r}: exchange {i}: 'ts' {item['ts']!r} is not an ISO 8601 date; "
                               "nothing was imported") from None
            try:
                seconds = when.timestamp()
            except (ValueError, OverflowError, OSError):  # year 1 in local time is before year 1 in UTC
                raise CLIError(f"{path!r}: exchange {i}: 'ts' {item['ts']!r} is out of range; "
                               "nothing was imported") from None
            item = {**item, "ts": seconds}
        out.append(item)
    return out


def _refuse_export(text: str, path: str) -> None:
    """An export given as past exchanges (one JSON object with a session's parts) is named as such."""
    if not text.lstrip().startswith("{"):
        return
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return  # JSON lines, or not JSON: said by the reading that follows
    if isinstance(data, Mapping) and ({"plugin", "session_id", "sessions"} & set(data)):
        raise CLIError(f"exchanges file {path!r} is an export (what 'ovos-memory export' writes): import it "
                       "without --exchanges; nothing was imported")


def _json_lines(text: str) -> list[Any]:
    """One JSON value per non-blank line; an error names the line of the file (json's own message
    counts within that line alone: "line 1")."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number}: {exc.msg} (column {exc.colno})") from None
    return out


def _import_exchanges(args: argparse.Namespace, ui: UI) -> int:
    if args.session is None or args.all:
        raise CLIError("import --exchanges needs --session (the session the exchanges belong to), not --all")
    items = _past_exchanges(args.file)
    with _backend(args) as memory:
        if not callable(getattr(memory, "import_exchanges", None)):
            raise CLIError(f"{getattr(memory, 'plugin_name', type(memory).__name__)} cannot import exchanges; "
                           "retrieval memories and composites can")
        try:
            count = memory.import_exchanges(args.session, items)
        except (TypeError, ValueError, OverflowError) as exc:
            raise CLIError(f"{args.file!r}: {exc}; nothing was imported") from None
        except RecursionError:
            raise CLIError(f"{args.file!r}: an exchange is nested too deeply to store; nothing was imported") from None
        settled = wait_for_index(memory, ui, 600)
        ui.out.print(f"imported {count} exchange(s) into {escape(memory_named(memory, args.session))}")
        if not settled:
            _not_settled(ui)
    return 0


def cmd_import(args: argparse.Namespace, ui: UI) -> int:
    if getattr(args, "exchanges", False):
        return _import_exchanges(args, ui)
    if args.all and args.session is not None:
        raise CLIError("--session only applies to a file holding one session, not --all")
    items = _import_items(read_json(args.file, "export file"), args.file, args.all)
    if args.session is not None and len(items) != 1:
        raise CLIError("--session only applies to a file holding one session")
    _refuse_what_it_keeps_none_of(args, items)
    with _backend(args) as memory:
        name = getattr(memory, "plugin_name", "")
        with _progress(ui) as progress:
            task = progress.add_task("importing", total=len(items))
            for i, item in enumerate(items):
                _import_one(memory, item, args, i)
                progress.advance(task)
        settled = wait_for_index(memory, ui, 600)
        ui.out.print(f"imported {len(items)} session(s) into {name or type(memory).__name__}")
        others = sorted({str(item["plugin"]) for item in items if item.get("plugin") and item["plugin"] != name})
        if others and name:
            ui.err.print(f"[yellow]note:[/yellow] exported from {escape(', '.join(others))}: what {name} keeps "
                         "of it (a window, documents, a summary or facts) was imported")
        if not settled:
            _not_settled(ui)
    return 0


def _not_settled(ui: UI) -> None:
    # Stored, but the index (or a summary) is not done: say so, do not hide it.
    ui.err.print("[yellow]note:[/yellow] background work (indexing, summaries) is not finished; it "
                 "resumes the next time this memory runs")


def _progress(ui: UI) -> Any:
    """A progress bar on stderr, drawn on a terminal only (a log or a pipe gets nothing, not even
    the blank line a disabled rich bar leaves)."""
    if not ui.err.is_terminal:
        return _NoProgress()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=ui.err, transient=True)


class _NoProgress:
    """The calls of a rich ``Progress``, drawing nothing."""

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def advance(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


def wait_for_index(memory: Any, ui: UI, timeout: float | None = None, poll: float = 0.25) -> bool:
    """Wait for the memory's background work (documents waiting for the index: what was imported,
    or everything after an embedder change), with a progress bar of the documents indexed on a
    terminal. False when ``timeout`` seconds passed first."""
    import time

    backlog, flush = getattr(memory, "index_backlog", None), getattr(memory, "flush", None)
    if not callable(flush):
        return True  # a third-party memory with no background work to wait for
    waiting = int(backlog()) if callable(backlog) else 0
    deadline = None if timeout is None else time.monotonic() + timeout
    total = waiting
    with _progress(ui) as progress:
        task = progress.add_task("indexing", total=total or None)
        while True:
            left = poll if deadline is None else min(poll, max(0.0, deadline - time.monotonic()))
            if flush(left) is not False:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            waiting = int(backlog()) if callable(backlog) else waiting
            total = max(total, waiting)
            progress.update(task, total=total or None, completed=total - waiting)


def cmd_index(args: argparse.Namespace, ui: UI) -> int:
    with _backend(args) as memory:
        name = getattr(memory, "plugin_name", type(memory).__name__)
        if not callable(getattr(memory, "index_backlog", None)):
            raise CLIError(f"{name} keeps no index of its own (retrieval memories and composites do)")
        waiting = memory.index_backlog()  # an embedder changed since the vectors were made: all of them
        if not wait_for_index(memory, ui, args.timeout):
            raise CLIError(f"the index of {name} is not up to date after {args.timeout:g} s: "
                           f"{memory.index_backlog()} document(s) still wait (the work resumes the next time this "
                           "memory runs)", EXIT_ERROR)
        ui.out.print(f"the index of {name} is up to date ({waiting} document(s) indexed now)", soft_wrap=True)
    return 0


def _refuse_what_it_keeps_none_of(args: argparse.Namespace, items: list[Mapping[str, Any]]) -> None:
    """An export the memory keeps nothing of (entity's facts into recency) is refused before its
    stores are opened: a refused import creates no store. A composite, or another package's
    memory, is asked once open."""
    from .._memory.conversion import converted
    from .persona import memory_class

    cls = memory_class(_backend_spec(args)[0])
    if cls is None or not getattr(cls, "export_parts", None):
        return
    for index, item in enumerate(items):
        try:
            converted(item, cls)
        except ValueError as exc:
            before = f" ({index} session(s) before it in the file would be imported)" if index else ""
            raise CLIError(f"{args.file!r}: cannot import session {item.get('session_id')!r}: {exc}{before}; "
                           "nothing was imported") from None


def _import_one(memory: Any, item: Mapping[str, Any], args: argparse.Namespace, index: int) -> None:
    """One session of the file; what the memory refuses (a malformed export, one of a kind it
    keeps nothing of) is one line naming the session, and what was imported before it."""
    try:
        memory.import_session(item, args.session)
        return
    except (TypeError, ValueError) as exc:
        why = str(exc)
    except RecursionError:
        why = "it is nested too deeply to store"
    before = f" ({index} session(s) before it in the file were imported)" if index else ""
    raise CLIError(f"{args.file!r}: cannot import session {item.get('session_id')!r}: {why}{before}")


def cmd_stats(args: argparse.Namespace, ui: UI) -> int:
    from rich.table import Table

    with _backend(args, read_only=True) as memory:
        found = _sessions(memory) or []
        rows: list[tuple[str, dict[str, int]]] = []
        shared = False
        with listed_keys():
            for sid in found[: args.limit]:
                data = memory.export(sid) if callable(getattr(memory, "export", None)) else {}
                counts = _tally(data, elsewhere=set(found) - {sid})
                rows.append((sid, {"window": len(memory.get_history(sid)), **counts}))
                shared = shared or _shares_facts(data)
        columns = list(dict.fromkeys(["window", *(c for _, counts in rows for c in counts)]))  # what it keeps
        people = [sid for sid in found if _person_of(memory, sid)]
        title = f"{getattr(memory, 'plugin_name', type(memory).__name__)}: {len(found)} session(s)"
        title += f", {len(people)} of them people's" if people else ""
        table = Table(title=title, min_width=len(title) + 4)  # a title on one line over a narrow table
        for col in ("session", *(["person"] if people else []), *columns):
            table.add_column(col, justify="left" if col in ("session", "person") else "right")
        for sid, counts in rows:
            person = [Text(printable(_person_of(memory, sid) or "-", lines=False))] if people else []
            table.add_row(Text(printable(sid, lines=False)), *person, *(str(counts.get(c, 0)) for c in columns))
        if rows:
            table.add_row("[bold]total[/bold]", *([""] if people else []),
                          *(f"[bold]{sum(r.get(c, 0) for _, r in rows)}[/bold]" for c in columns))
        notes = [f"first {args.limit} sessions shown (--limit)"] if len(found) > args.limit else []
        if shared:
            notes.append("facts are shared by every session (scope global): each is counted in the session it "
                         "came from")
        table.caption = "; ".join(notes) or None
        ui.out.print(table)
    return 0


def _tally(data: Mapping[str, Any], member: str = "", elsewhere: Collection[str] = ()) -> dict[str, int]:
    """Documents, facts and summaries in an export. Each retriever of a composite stores every
    exchange: its documents get a column of their own (added up, they would count each twice).
    A member's part kept under another listed key (a household's facts, in each person's export)
    is counted in that key's row only."""
    out: dict[str, int] = {}
    for name, export in (data.get("members") or {}).items():
        if isinstance(export, Mapping) and export.get("session_id") in elsewhere:
            continue
        for key, count in _tally(export, str(name).replace("ovos-memory-plugin-", "")).items():
            out[key] = out.get(key, 0) + count
    if "documents" in data:
        out[f"documents ({member})" if member else "documents"] = len(data.get("documents") or [])
    if "facts" in data:
        out["facts"] = out.get("facts", 0) + len(data.get("facts") or [])
    if "summary" in data:
        out["summary"] = out.get("summary", 0) + int(bool(data.get("summary")))
    return out


def _shares_facts(data: Mapping[str, Any]) -> bool:
    return data.get("scope") == "global" and "facts" in data or any(
        _shares_facts(m) for m in (data.get("members") or {}).values() if isinstance(m, Mapping))


def cmd_plugins(args: argparse.Namespace, ui: UI) -> int:
    import importlib.metadata

    from rich.table import Table

    from .._core.loading import MEMORY_GROUP
    from .persona import OUR_SHORT_TERM, PERSONA_DEFAULT_MEMORY

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
    from .docs_tables import config_table

    ui.write(config_table(args.entry_point) + "\n")
    return 0
