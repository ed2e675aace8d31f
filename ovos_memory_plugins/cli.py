"""``ovos-memory``: see, try and manage what a persona remembers.

::

    ovos-memory demo                                   # scripted conversation, no network, no LLM
    ovos-memory chat --persona assistant.json          # talk to the persona's OpenAI-compatible endpoint
    ovos-memory ask --persona assistant.json "what is my dog called?"   # reads memory, records nothing
    ovos-memory sessions --persona assistant.json      # also: show, search, forget, export, import, index, stats
    ovos-memory serve --persona assistant.json         # a web page on 127.0.0.1 to see and forget what is kept
    ovos-memory check-config assistant.json
    ovos-memory plugins
    ovos-memory --version

Every failure is one line on stderr naming the problem, and a non-zero exit status
(2: bad input or config, 3: the chat endpoint failed, 4: no such session, 1: anything else).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from . import __version__
from ._cli.chat import cmd_ask, cmd_chat, cmd_demo
from ._cli.check import cmd_check_config
from ._cli.commands import (
    cmd_docs_table,
    cmd_export,
    cmd_forget,
    cmd_import,
    cmd_index,
    cmd_plugins,
    cmd_search,
    cmd_sessions,
    cmd_show,
    cmd_stats,
)
from ._cli.output import EXIT_ENDPOINT, EXIT_ERROR, EXIT_INPUT, UI, CLIError, logs_to_stderr, private_stdout
from ._cli.persona import PersonaError
from ._cli.serve import DEFAULT_PORT, TOKEN_ENV, cmd_serve
from .errors import ConfigError, LLMError, MemoryPluginError

__all__ = ["build_parser", "CLIError", "main"]


# -- parser ------------------------------------------------------------------------------------
def _number(kind: type, minimum: float, maximum: float | None = None, exclusive: bool = False) -> Any:
    """An argparse type: a ``kind`` number from ``minimum`` (above it when ``exclusive``) to
    ``maximum``; anything else is a usage error (exit 2) naming the range, never a value wrapped
    or clamped into one (``--port 70000`` is not port 4464)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        low_ok = value > minimum if exclusive else value >= minimum
        if not (low_ok and (maximum is None or value <= maximum)):  # NaN fails both
            bounds = f"above {minimum:g}" if exclusive else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {bounds}"
                                             + (f" and at most {maximum:g}" if maximum is not None else ""))
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ovos-memory", description="See, try and manage what an OVOS persona "
                                                                     "remembers.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
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
    persona.add_argument("--timeout", type=_number(float, 0, exclusive=True), default=60.0,
                         help="seconds per request (default: %(default)s)")

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

    p = sub.add_parser("sessions", parents=[backend], help="list session ids (a person's memory: person:NAME)")
    p.set_defaults(func=cmd_sessions)
    p = sub.add_parser("show", parents=[backend], help="show a session's window, facts and summary")
    p.add_argument("session")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("search", parents=[backend], help="what the memory would recall for a query")
    p.add_argument("query")
    p.add_argument("--session", help="only this session (as the memory's scope allows)")
    p.add_argument("-k", type=_number(int, 1, 100), default=5, help="hits, 1 to 100 (default: %(default)s)")
    p.set_defaults(func=cmd_search)
    p = sub.add_parser("forget", parents=[backend], help="delete everything of a session (of its person in "
                       "scope person), report what")
    p.add_argument("session", nargs="?")
    p.add_argument("--person", metavar="NAME", help="everything of this person of 'people', whichever session")
    p.set_defaults(func=cmd_forget)
    p = sub.add_parser("export", parents=[backend], help="a session (or a person) as JSON on stdout")
    p.add_argument("session", nargs="?")
    p.add_argument("--person", metavar="NAME", help="everything of this person of 'people', whichever session")
    p.add_argument("--all", action="store_true", help="every session, as {\"sessions\": [...]}")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("import", parents=[backend], help="load what export wrote, or past exchanges with their dates")
    p.add_argument("file", metavar="FILE.json")
    p.add_argument("--session", help="import into this session id instead")
    p.add_argument("--all", action="store_true",
                   help="the file holds every session, as 'export --all' writes (checked); without it both shapes load")
    p.add_argument("--exchanges", action="store_true",
                   help='the file holds past exchanges, {"question", "answer", "ts"} as a JSON list or one per line '
                        "(ts: seconds since 1970 or an ISO 8601 date); needs --session")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("index", parents=[backend],
                       help="bring the index up to date (every document is embedded again after an embedder change), "
                            "with a progress bar")
    p.add_argument("--timeout", type=_number(float, 0, exclusive=True), default=None,
                   help="give up after this many seconds (default: never)")
    p.set_defaults(func=cmd_index)
    p = sub.add_parser("serve", parents=[backend], help="a web page and JSON API to see, search, export and forget "
                                                        "what the memory keeps")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s, this computer only; any other needs --token)")
    p.add_argument("--port", type=_number(int, 0, 65535), default=DEFAULT_PORT,
                   help="port (default: %(default)s; 0: any free one)")
    p.add_argument("--token", help=f"every API request must carry 'Authorization: Bearer TOKEN'; the page asks for it "
                                   f"(or set {TOKEN_ENV}: a command line is visible to other users)")
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("stats", parents=[backend], help="sessions and what each holds")
    p.add_argument("--limit", type=_number(int, 1), default=50, help="sessions listed (default: %(default)s)")
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


#: Commands whose log lines are shown as they happen.
_LIVE_LOGS = ("chat", "demo", "ask", "serve")
#: Commands whose output holds no memory (documentation, the installed plugins).
_PUBLIC_OUTPUT = ("docs-table", "plugins")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A command's output may hold memory (sessions, ids, what was said): a file it is redirected
    # to (`> out.json`) is private, as every file holding a conversation is.
    if args.command not in _PUBLIC_OUTPUT:
        private_stdout()
    # A management command reports its failure in one line: what the library logged on the way
    # (a misspelt config key, say) is shown only if it succeeds (or with -v/--debug). Chat shows
    # it as it happens, and reports what matters itself (one line per problem): library warnings
    # would repeat it, so only errors are logged there unless asked for more.
    hold = args.command not in _LIVE_LOGS and not (args.debug or args.verbose)
    level = "DEBUG" if args.debug else "INFO" if args.verbose else "WARNING" if hold else "ERROR"
    try:
        with logs_to_stderr(level, hold=hold):
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
    except RecursionError:  # only hostile input nests this deep (JSON inside a config or an export)
        if args.debug:
            raise
        code, message = EXIT_INPUT, "the input is nested too deeply to handle"
    except Exception as exc:  # noqa: BLE001 - never a traceback for the user (--debug shows it)
        if args.debug:
            raise
        code, message = EXIT_ERROR, f"unexpected {type(exc).__name__}: {exc} (run with --debug for details)"
    print(f"ovos-memory: error: {' '.join(message.split())}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
