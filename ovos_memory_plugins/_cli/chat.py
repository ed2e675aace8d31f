"""The persona commands of ``ovos-memory``: ``chat``, ``ask`` and the offline ``demo``."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import LLMError, LLMUnavailable, MemoryPluginError
from .output import EXIT_ENDPOINT, EXIT_ERROR, UI, CLIError, Text, count_items, escape
from .persona import MemorySlot, load_persona, persona_endpoint

__all__ = ["cmd_ask", "cmd_chat", "cmd_demo"]


def _persona_parts(args: argparse.Namespace, ui: UI) -> tuple[Any, Any, MemorySlot]:
    from .._memory.people import refuse_reserved
    from ..messages import check_session_id
    from .engine import ChatEndpoint, find_endpoint

    try:  # a session the memory would refuse at the first turn is said before anything runs
        refuse_reserved(check_session_id(args.session))
    except ValueError as exc:
        raise CLIError(f"--session: {exc}") from None
    persona = load_persona(args.persona)
    found = find_endpoint(persona.handlers, persona.data)
    if found is None:
        raise CLIError(f"persona {persona.name!r} has no OpenAI-compatible handler (an 'api_url' block); "
                       f"handlers: {', '.join(persona.handlers)}")
    endpoint = ChatEndpoint(found[1], timeout=args.timeout)
    try:
        slot = MemorySlot(persona.memory_module, persona.memory_config, endpoint=persona_endpoint(persona))
    except MemoryPluginError:
        raise
    except Exception as exc:  # noqa: BLE001 - ovos-persona would fail to load this persona too
        raise CLIError(f"memory plugin '{persona.memory_module}' failed to start: {exc}", EXIT_ERROR) from None
    if slot.memory is not None:  # it started: what is left to say is what it will not use
        _config_warnings(persona, ui)
    return persona, endpoint, slot


def _config_warnings(persona: Any, ui: UI) -> None:
    """Say, without -v, what the memory block holds that the memory will not use (a misspelt key,
    which the memory only logs): a persona must not run for weeks on a setting it never read."""
    from .check import config_problems

    if not persona.memory_module or not isinstance(persona.memory_config, dict):
        return
    for problem in config_problems(persona.memory_module, persona.memory_config):
        ui.err.print(f"[yellow]warning:[/yellow] {escape(problem)}", soft_wrap=True)


def _show_dropped(ui: UI, endpoint: Any, dropped: int, warned: list[bool]) -> None:
    if dropped and not warned[0]:
        warned[0] = True
        ui.err.print(f"[yellow]warning:[/yellow] {dropped} system message(s) dropped: 'allow_system_prompts' is "
                     f"off in the handler block, so memory injected as system messages is not sent")


class _Health:
    """Says, without -v, which memory works less well than configured and why, once per change."""

    def __init__(self, ui: UI):
        self.ui = ui
        self.shown: dict[str, str] = {}

    def check(self, memory: Any) -> None:
        report = getattr(memory, "degraded", None)
        try:
            now = dict(report()) if callable(report) else {}
        except Exception:  # noqa: BLE001 - a memory that cannot say how it is must not end the chat
            return
        for part, why in now.items():
            if self.shown.get(part) != why:
                self.ui.err.print(f"[yellow]memory degraded:[/yellow] {escape(part)}: {escape(why)}")
        for part in set(self.shown) - set(now):
            self.ui.err.print(f"[green]memory recovered:[/green] {escape(part)}")
        self.shown = now


def cmd_ask(args: argparse.Namespace, ui: UI) -> int:
    persona, endpoint, slot = _persona_parts(args, ui)
    health = _Health(ui)
    try:
        messages = slot.context(args.question, args.session)  # reads memory; records nothing
        if args.show_context:
            from ..messages import role_of

            for msg in messages[:-1]:
                ui.err.print(Text(f"[{role_of(msg)}] {msg.content}", style="dim"))
        health.check(slot.memory)
        payload, dropped = endpoint.prepare(messages)
        _show_dropped(ui, endpoint, dropped, [False])
        ui.write(endpoint.complete(payload) + "\n")
    finally:
        slot.close()
    return 0


def cmd_chat(args: argparse.Namespace, ui: UI) -> int:
    persona, endpoint, slot = _persona_parts(args, ui)
    interactive = sys.stdin.isatty()
    memory_note = persona.memory_module or "none"
    if slot.enabled and slot.memory is None:
        from .._core.loading import did_you_mean

        hint = did_you_mean(str(slot.module))  # "; did you mean 'X'?", or where to look
        ui.err.print(f"[yellow]warning:[/yellow] memory plugin '{escape(str(slot.module))}' not available"
                     f"{escape(hint)}{'' if hint.endswith('?') else ';'} chatting without memory (it is adopted if "
                     "it gets installed during the chat)")
        memory_note += " (off)"
    ui.err.print(f"persona [bold]{escape(persona.name)}[/bold], session [bold]{escape(args.session)}[/bold], memory "
                 f"{escape(memory_note)}, endpoint {escape(endpoint.api_url)}. Commands: /show /forget /quit")
    warned = [False]
    failed = False
    health = _Health(ui)
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
            health.check(slot.memory)
    finally:
        memory = slot.memory
        slot.close()
        health.check(memory)  # the last exchange's background work is done now
    return EXIT_ENDPOINT if failed else 0


def _exchange(text: str, args: argparse.Namespace, ui: UI, endpoint: Any, slot: MemorySlot,
              warned: list[bool]) -> None:
    messages = slot.context(text, args.session)
    payload, dropped = endpoint.prepare(messages)
    _show_dropped(ui, endpoint, dropped, warned)
    if args.no_stream:
        answer = endpoint.complete(payload)
        ui.write(answer + "\n")
    else:
        answer, interrupted = _streamed(payload, ui, endpoint)
        if interrupted:
            if answer.strip():
                slot.remember(text, answer.strip(), args.session)
            ui.err.print("[dim](interrupted; the partial answer was remembered)[/dim]")
            return
    slot.remember(text, answer.strip(), args.session)


def _streamed(payload: list[dict[str, str]], ui: UI, endpoint: Any) -> tuple[str, bool]:
    """The streamed answer and whether Ctrl-C interrupted it. A stream that came back empty or
    cut off is asked for once more without streaming; an empty answer then is an error."""
    from .engine import StreamCut

    parts: list[str] = []
    problem = ""
    stream = endpoint.stream(payload)
    try:
        for piece in stream:
            parts.append(piece)
            ui.write(piece)
    except KeyboardInterrupt:
        ui.write("\n")
        return "".join(parts), True  # what was said so far is still an answer the user heard
    except StreamCut as exc:
        problem = f"the streamed answer was cut off ({exc})"
    finally:
        stream.close()
    answer = "".join(parts)
    if not problem and answer.strip():
        ui.write("\n")
        return answer, False
    if parts:
        ui.write("\n")
    ui.err.print(f"[yellow]warning:[/yellow] {escape(problem or 'the streamed answer was empty')}; "
                 "asking again without streaming")
    answer = endpoint.complete(payload)  # raises LLMError on an empty answer again
    ui.write(answer + "\n")
    return answer, False


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
            from .commands import memory_named

            named = memory_named(memory, session_id)
            ui.out.print(Text(f"forgot {count_items(memory.forget(session_id))} item(s) of {named}"))
    else:
        ui.err.print("commands: /show (what is remembered), /forget (this session), /quit")
    return False


def cmd_demo(args: argparse.Namespace, ui: UI) -> int:
    from .demo import run_demo

    result = run_demo(ui.out, args.data_dir, args.verbose)
    return 0 if result["right"] else EXIT_ERROR

