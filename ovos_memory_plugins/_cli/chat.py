"""The persona commands of ``ovos-memory``: ``chat``, ``ask`` and the offline ``demo``."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import LLMError, LLMUnavailable, MemoryPluginError
from .output import EXIT_ENDPOINT, EXIT_ERROR, UI, CLIError, Text, count_items, escape
from .persona import MemorySlot, load_persona

__all__ = ["cmd_ask", "cmd_chat", "cmd_demo"]


def _persona_parts(args: argparse.Namespace) -> tuple[Any, Any, MemorySlot]:
    from .engine import ChatEndpoint, find_endpoint

    persona = load_persona(args.persona)
    found = find_endpoint(persona.handlers, persona.data)
    if found is None:
        raise CLIError(f"persona {persona.name!r} has no OpenAI-compatible handler (an 'api_url' block); "
                       f"handlers: {', '.join(persona.handlers)}")
    endpoint = ChatEndpoint(found[1], timeout=args.timeout)
    try:
        slot = MemorySlot(persona.memory_module, persona.memory_config)
    except MemoryPluginError:
        raise
    except Exception as exc:  # noqa: BLE001 - ovos-persona would fail to load this persona too
        raise CLIError(f"memory plugin '{persona.memory_module}' failed to start: {exc}", EXIT_ERROR) from None
    return persona, endpoint, slot


def _show_dropped(ui: UI, endpoint: Any, dropped: int, warned: list[bool]) -> None:
    if dropped and not warned[0]:
        warned[0] = True
        ui.err.print(f"[yellow]warning:[/yellow] {dropped} system message(s) dropped: 'allow_system_prompts' is "
                     f"off in the handler block, so memory injected as system messages is not sent")


def cmd_ask(args: argparse.Namespace, ui: UI) -> int:
    persona, endpoint, slot = _persona_parts(args)
    try:
        messages = slot.context(args.question, args.session)  # reads memory; records nothing
        if args.show_context:
            from ..messages import role_of

            for msg in messages[:-1]:
                ui.err.print(Text(f"[{role_of(msg)}] {msg.content}", style="dim"))
        payload, dropped = endpoint.prepare(messages)
        _show_dropped(ui, endpoint, dropped, [False])
        ui.write(endpoint.complete(payload) + "\n")
    finally:
        slot.close()
    return 0


def cmd_chat(args: argparse.Namespace, ui: UI) -> int:
    persona, endpoint, slot = _persona_parts(args)
    interactive = sys.stdin.isatty()
    memory_note = persona.memory_module or "none"
    if slot.enabled and slot.memory is None:
        ui.err.print(f"[yellow]warning:[/yellow] memory plugin '{escape(str(slot.module))}' not available; "
                     "chatting without memory (it is adopted if it gets installed during the chat)")
    ui.err.print(f"persona [bold]{escape(persona.name)}[/bold], session [bold]{escape(args.session)}[/bold], memory "
                 f"{escape(memory_note)}, endpoint {escape(endpoint.api_url)}. Commands: /show /forget /quit")
    warned = [False]
    failed = False
    try:
        while True:
            try:
                line = input("you> " if interactive else "")
            except EOFError:
                break
            except KeyboardInterrupt:
                ui.err.print("")
                break
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                if _chat_command(text, args.session, slot, ui):
                    break
                continue
            had_memory = slot.memory is not None
            try:
                _exchange(text, args, ui, endpoint, slot, warned)
                if slot.memory is not None and not had_memory:
                    ui.err.print(f"[green]memory plugin '{escape(str(slot.module))}' is available now; memory "
                                 "enabled[/green]")
                failed = False
            except LLMUnavailable as exc:
                raise CLIError(f"chat endpoint unreachable: {exc}", EXIT_ENDPOINT) from None
            except LLMError as exc:
                failed = True
                print(f"ovos-memory: error: chat endpoint failed: {exc}", file=sys.stderr)
    finally:
        slot.close()
    return EXIT_ENDPOINT if failed else 0


def _exchange(text: str, args: argparse.Namespace, ui: UI, endpoint: Any, slot: MemorySlot,
              warned: list[bool]) -> None:
    messages = slot.context(text, args.session)
    payload, dropped = endpoint.prepare(messages)
    _show_dropped(ui, endpoint, dropped, warned)
    parts: list[str] = []
    interrupted = False
    if args.no_stream:
        parts.append(endpoint.complete(payload))
        ui.write(parts[0])
    else:
        stream = endpoint.stream(payload)
        try:
            for piece in stream:
                parts.append(piece)
                ui.write(piece)
        except KeyboardInterrupt:
            interrupted = True  # what was said so far is still an answer the user heard
        finally:
            stream.close()
    ui.write("\n")
    answer = "".join(parts).strip()
    if answer:
        slot.remember(text, answer, args.session)
    if interrupted:
        ui.err.print("[dim](interrupted; the partial answer was remembered)[/dim]")


def _chat_command(text: str, session_id: str, slot: MemorySlot, ui: UI) -> bool:
    """Runs an in-chat command; True means quit."""
    command = text.split()[0].lower()
    memory = slot.get()
    if command in ("/quit", "/exit", "/q"):
        return True
    if command == "/show":
        if memory is None:
            ui.err.print("no memory")
        else:
            from ..messages import role_of

            for msg in memory.get_history(session_id):
                ui.out.print(f"[bold]{role_of(msg)}[/bold]: {escape(msg.content)}")
    elif command == "/forget":
        if memory is None or not callable(getattr(memory, "forget", None)):
            ui.err.print("this memory cannot forget")
        else:
            ui.out.print(Text(f"forgot {count_items(memory.forget(session_id))} item(s) of session {session_id!r}"))
    else:
        ui.err.print("commands: /show (what is remembered), /forget (this session), /quit")
    return False


def cmd_demo(args: argparse.Namespace, ui: UI) -> int:
    from .demo import run_demo

    result = run_demo(ui.out, args.data_dir, args.verbose)
    return 0 if result["right"] else EXIT_ERROR

