"""``ContextMemory``: the one place where a turn's message list is built.

Every memory of this package is a ``ContextMemory``. Each supplies only its *parts*; the base
puts them together, the same way for all, under one token budget and one inject mode::

    system prompt -> blocks (a summary, facts) -> the verbatim window -> recall -> the utterance

* :meth:`ContextMemory.context_parts` gives the window (and the history a query may fold in)
  and the blocks; a memory overrides :meth:`~ContextMemory.context_blocks`, or
  ``context_parts`` itself when it reads both at once (one record, one Redis script).
* :class:`RecallingMemory` adds recall: a query from the utterance, hits from :meth:`recall`
  (a document store's search, or a composite's fusion), rendered under ``context.header``.
* ``max_context_tokens`` bounds the whole list (the system prompt and the utterance always fit
  first, then the blocks, the window's newest messages, recall); ``max_added_tokens`` bounds
  what is added besides the window (blocks, then recall).
* ``inject_mode`` places blocks and recall (see :mod:`~ovos_memory_plugins.inject` for the shapes).

Example, a memory with a block of its own::

    class MottoMemory(ContextMemory):
        def context_blocks(self, session_id, utterance=""):
            return [system_message("Motto: be kind")]

        def get_history(self, session_id): return []
        def update_history(self, new_messages, session_id): pass
"""
from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, ClassVar

from ._core.compat import AgentMessage
from ._core.tokens import estimate_tokens
from ._index.follow_up import is_follow_up
from ._memory.people import parse_people
from ._memory.plugin import MemoryPlugin
from .common import MemoryHit
from .config import check_template, option, template_fields
from .errors import ConfigError
from .inject import INJECT_MODES, Injection, assemble_context, check_inject_mode
from .messages import (
    check_session_id,
    check_utterance,
    clean_text,
    context_window,
    fit_blocks,
    fit_window,
    is_role,
    message_tokens,
)
from .render import DATE_MODES, DEFAULT_HEADER, ContextStyle, render_hits

__all__ = [
    "ContextConfig",
    "ContextMemory",
    "ContextParts",
    "PRIVATE_SCOPES",
    "QUERY_MODES",
    "RecallConfig",
    "RecallingMemory",
    "SCOPES",
]

SCOPES = ("session", "global", "person")
#: The scopes of a memory that keeps no shared pool (a window, a summary).
PRIVATE_SCOPES = ("session", "person")
QUERY_MODES = ("utterance", "history", "follow-up")
#: What of each earlier user turn a follow-up's query folds in (query_mode: follow-up).
_LEANED_ON_CHARS = 1000
#: Tokens the recalled block spends besides its chunks ("Context:", separators).
_BLOCK_OVERHEAD_TOKENS = 8


@dataclasses.dataclass(frozen=True)
class ContextConfig:
    """The keys of the context every memory builds (each memory's config extends this)."""

    system_prompt: str = option("", "persona system prompt, sent first")
    inject_mode: str = option("system", "where the memory's blocks and recall go: system, developer, "
                              "system_prompt (one system message), user (in the user turn) or tool",
                              choices=INJECT_MODES)
    header: str = option(DEFAULT_HEADER, "text before recalled context (and, in user mode, the blocks)",
                         key="context.header")
    tool_name: str = option("search_memory", "tool name in tool mode", key="context.tool_name")
    system_prompt_template: str = option("{system}\n\n{header}\n\nContext:\n{context}",
                                         "system_prompt mode template (str.format)")
    user_template: str = option("{header}\n\nContext:\n{context}\n\nQuestion: {utterance}",
                                "user mode template (str.format)")
    max_context_tokens: int | None = option(None, "token budget for the whole context: system prompt and "
                                            "utterance first, then blocks (summary, facts), the newest "
                                            "messages of the window, recall; null: unbounded", kind=int, minimum=1)
    max_added_tokens: int | None = option(None, "token budget for what is added besides the window: blocks "
                                          "(summary, facts), then recall; null: unbounded", kind=int, minimum=1)
    # The reference's windows and summaries had no 'scope' and ignored one: a persona written for
    # it with 'global' (the retrievers' value) there still loads, warned, each session keeping its
    # own as it did; a typo of ours ("persons") is still refused.
    scope: str = option("session", "session: one memory per session id; person: one per person of 'people' "
                        "(other sessions, guests, keep their own)", choices=PRIVATE_SCOPES,
                        read_as={"global": "session"})
    people: dict[str, Any] = option({}, 'scope person: who owns which sessions, {"alice": ["kitchen", "alice-*"]} '
                                    "(session ids or glob patterns); a session two people claim is refused")
    household: bool = option(False, "scope person: every person's sessions share one memory (the household's); "
                             "guests never read or write it")

    def __post_init__(self) -> None:
        check_template("", "system_prompt_template", self.system_prompt_template, ("system", "header", "context"))
        check_template("", "user_template", self.user_template, ("header", "context", "utterance"))
        parse_people(self.people)


@dataclasses.dataclass
class ContextParts:
    """What a memory contributes to a turn, before the budget and the inject mode apply.

    Attributes:
        window: the verbatim messages sent before the utterance (a valid context window: no
            trailing USER turn, no orphaned tool result).
        blocks: system blocks (a summary, facts), in the order they are sent.
        history: the stored messages a ``query_mode`` of history or follow-up folds user turns from
            (the window's source, before trimming); defaults to ``window``.
        query: the search query, when the memory built it already (a composite, choosing its
            members' blocks by it); None: recall builds it.
    """

    window: list[AgentMessage] = dataclasses.field(default_factory=list)
    blocks: list[AgentMessage] = dataclasses.field(default_factory=list)
    history: list[AgentMessage] | None = None
    query: str | None = None

    def query_history(self) -> list[AgentMessage]:
        return self.window if self.history is None else self.history


class ContextMemory(MemoryPlugin):
    """A memory whose context is built by the shared pipeline (see the module docstring).

    A subclass supplies ``get_history`` and ``update_history`` (the OPM contract) and its parts:
    by default the window is ``get_history`` (trailing USER turns dropped), and the blocks are
    :meth:`context_blocks` (none).
    """

    Config: ClassVar[type] = ContextConfig
    #: True: an answer whose question was trimmed away is left out (ovos-persona's rule).
    drop_leading_answers: ClassVar[bool] = False
    #: False: the system prompt is sent exactly as configured (the reference's retrieval base);
    #: True: stripped (the reference's other backends).
    strips_system_prompt: ClassVar[bool] = True
    live_settings: ClassVar[frozenset[str]] = frozenset({
        "inject_mode", "header", "tool_name", "system_prompt_template", "user_template", "max_context_tokens",
        "max_added_tokens"})

    @classmethod
    def check_settings(cls, settings: Any) -> list[str]:
        problems = super().check_settings(settings)
        try:
            check_inject_mode(settings.inject_mode, cls.plugin_name)
        except ConfigError as exc:
            problems.append(str(exc).removeprefix(f"{cls.plugin_name}: "))
        return problems

    def __init__(self, config: Any = None):
        super().__init__(config)
        self._tool_counters: defaultdict[str, itertools.count[int]] = defaultdict(itertools.count)
        self._settings_changed()

    def _settings_changed(self) -> None:
        s = self.settings
        check_inject_mode(s.inject_mode, self.plugin_name)
        self.injection = Injection(s.inject_mode, s.header, s.system_prompt_template, s.user_template, s.tool_name)
        # The reference fills templates as given, so a template missing a field still loads; but
        # in its mode it silently drops the user's words or the recall, which nobody means.
        used = {"user": ("user_template", s.user_template, ("utterance", "context")),
                "system_prompt": ("system_prompt_template", s.system_prompt_template, ("context",))}
        key, template, needed = used.get(s.inject_mode, ("", "", ()))
        missing = [name for name in needed if name not in template_fields(template)]
        if missing:
            from ._core.log import LOG

            LOG.warning(f"{self.plugin_name}: inject_mode {s.inject_mode!r} fills '{key}', which has no "
                        f"{' or '.join('{' + name + '}' for name in missing)}: that part of the turn is not sent")

    # -- the parts a memory supplies ---------------------------------------------------------
    def context_parts(self, utterance: str, session_id: str, *, window: bool = True,
                      blocks: bool = True) -> ContextParts:
        """This memory's window and blocks for a turn (``window``/``blocks`` False: not wanted,
        so not read: a composite asks its primary for the window and its plain members for
        blocks)."""
        history = self.get_history(session_id) if window else []
        return ContextParts(context_window(history, self.drop_leading_answers),
                            self.context_blocks(session_id, utterance) if blocks else [], history)

    def context_blocks(self, session_id: str, utterance: str = "") -> list[AgentMessage]:
        """The system blocks this memory adds besides its prompt (a summary, facts); none here.
        ``utterance`` lets a memory choose what is relevant to the turn."""
        return []

    def _recalled(self, utterance: str, session_id: str, parts: ContextParts, window: list[AgentMessage],
                  max_tokens: int | None) -> str:
        """The rendered recall for the turn, within ``max_tokens``; "" for a memory that recalls nothing."""
        return ""

    # -- the pipeline ---------------------------------------------------------------------------
    def build_conversation_context(self, utterance: str, session_id: str) -> list[AgentMessage]:
        text = check_utterance(utterance)
        sid = check_session_id(session_id)
        parts = self.context_parts(text, sid)
        blocks, window, recall_tokens = self._fit(text, parts)
        context = self._recalled(text, sid, parts, window, recall_tokens)
        return self._assemble(text, sid, blocks, window, context)

    def _fit(self, utterance: str, parts: ContextParts) -> tuple[list[AgentMessage], list[AgentMessage], int | None]:
        """The blocks and window within the budgets, and the tokens left for recall (None: unbounded).

        The system prompt and the utterance fit first; then the blocks, the window (its newest
        messages) and recall, each bounded by what is left of both budgets.
        """
        s = self.settings
        total = None if s.max_context_tokens is None else (
            s.max_context_tokens - message_tokens(self._prompt()) - message_tokens(utterance))
        added = s.max_added_tokens
        blocks, window = parts.blocks, parts.window
        if total is not None or added is not None:
            blocks = fit_blocks(blocks, max(0, min(b for b in (total, added) if b is not None)))
            used = sum(message_tokens(m.content) for m in blocks)
            total = None if total is None else total - used
            added = None if added is None else added - used
        if total is not None:
            window, total = fit_window(window, max(0, total), self.drop_leading_answers)
        left = [b for b in (total, added) if b is not None]
        return blocks, window, (max(0, min(left)) if left else None)

    def _prompt(self) -> str:
        return self.system_prompt.strip() if self.strips_system_prompt else self.system_prompt

    def _assemble(self, utterance: str, session_id: str, blocks: Sequence[AgentMessage],
                  window: Sequence[AgentMessage], context: str,
                  given: Sequence[AgentMessage] = ()) -> list[AgentMessage]:
        tool_id = ""
        if context and self.injection.mode == "tool":
            tool_id = f"memrag_{session_id}_{next(self._tool_counters[session_id])}"
        return assemble_context(utterance, window, context, self.injection, self._prompt(), blocks, tool_id, given)

    def assemble_context(self, utterance: str, session_id: str, context: str, history: Sequence[AgentMessage],
                         extra_system: Sequence[AgentMessage] | None = None) -> list[AgentMessage]:
        """The message list of a turn from ready parts: the system prompt, the ``extra_system``
        messages as given, the recalled ``context`` as ``inject_mode`` says, ``history`` (trailing
        USER turns dropped) and the utterance, stripped, last. For a subclass that builds its own
        context, as the reference's retrieval base offers, and in its order: the extra messages
        follow the system part whatever the mode (this package's own blocks, a summary or facts,
        follow the mode instead)."""
        text = check_utterance(utterance)
        sid = check_session_id(session_id)
        return self._assemble(text, sid, [], context_window(history), context, list(extra_system or ()))


@dataclasses.dataclass(frozen=True)
class RecallConfig(ContextConfig):
    """The keys of a memory that recalls (a retriever, a composite)."""

    max_num_results: int = option(5, "top-k recalled items", key="retrieval.max_num_results", minimum=1)
    min_score: float | None = option(None, "drop hits scoring below this (backend scale); null keeps all",
                                     key="retrieval.min_score", kind=float)
    query_mode: str = option("utterance", "utterance: search the turn; history: fold in earlier user turns; "
                             "follow-up: fold them in when the turn leans on them ('and tomorrow?', 'where does "
                             "she live?'); any other value acts like utterance", key="retrieval.query_mode",
                             choices=QUERY_MODES, otherwise="utterance",
                             read_as={"follow_up": "follow-up", "followup": "follow-up"})
    query_history_turns: int = option(3, "user turns folded into the query in history mode (in follow-up mode, "
                                      "at most)",
                                      key="retrieval.query_history_turns", minimum=0)
    chunk_prefix: str = option("- ", "text before each chunk", key="context.chunk_prefix")
    chunk_separator: str = option("\n\n", "text between chunks", key="context.chunk_separator")
    include_sources: bool = option(False, "prefix each chunk with [doc id]", key="context.include_sources")
    show_dates: str = option("never", "never, or older: a recalled item said on an earlier day shows that day "
                             "('(3 May 2026) Q: ...')", key="context.show_dates", choices=DATE_MODES)
    dedup_history: bool = option(True, "skip recalled items already in the verbatim window",
                                 key="context.dedup_history")
    scope: str = option("session", "recall from this session only, from all (global), or from this person's "
                        "sessions (person, with 'people')", choices=SCOPES)


def _leaned_on(users: Sequence[str]) -> list[str]:
    """The user turns a follow-up leans on, newest first: the latest, and the ones before it
    while each is itself a follow-up ("my sister?", "and where does she live?", "and her job?");
    each cut to :data:`_LEANED_ON_CHARS` (a pasted page adds nothing a question leans on)."""
    kept: list[str] = []
    for text in reversed(users):
        kept.append(text[:_LEANED_ON_CHARS])
        if not is_follow_up(text):
            break
    return kept


class RecallingMemory(ContextMemory):
    """A ``ContextMemory`` that recalls: the query, :meth:`recall`, and the rendered block.

    Subclasses implement :meth:`recall` (and usually ``search``).
    """

    Config: ClassVar[type] = RecallConfig
    live_settings: ClassVar[frozenset[str]] = ContextMemory.live_settings | {
        "max_num_results", "min_score", "query_mode", "query_history_turns", "chunk_prefix", "chunk_separator",
        "include_sources", "show_dates", "dedup_history", "scope"}

    def _settings_changed(self) -> None:
        super()._settings_changed()
        s = self.settings
        self.style = ContextStyle(s.chunk_prefix, s.chunk_separator, s.include_sources, s.show_dates)

    def recall(self, query: str, session_id: str, window: Sequence[AgentMessage] = ()) -> list[MemoryHit]:
        """The hits for a turn's ``query``, best first, minus what ``window`` already holds."""
        return []

    def turn_recall(self, query: str, session_id: str, window: Sequence[AgentMessage],
                    blocks: Sequence[AgentMessage]) -> list[MemoryHit]:
        """The hits a turn sends: :meth:`recall`'s. A memory that also sends ``blocks`` (facts)
        may rank against them (the composite: a recalled exchange the current facts contradict)."""
        return self.recall(query, session_id, window)

    def build_query(self, utterance: str, history: Sequence[AgentMessage] | str | None = None) -> str:
        """The search query: the utterance, or in history mode earlier user turns too.

        ``history``: the stored messages to fold user turns from, or a session id whose window is
        read (code written for the reference package calls ``build_query(utterance)``, or passes
        the session id); None folds none."""
        utterance = clean_text(utterance)  # bounded, and storable: the query may be logged or embedded
        mode, turns = self.settings.query_mode, self.settings.query_history_turns
        if mode not in ("history", "follow-up") or not turns or history is None:
            return utterance
        if mode == "follow-up" and not is_follow_up(utterance):
            return utterance
        if isinstance(history, str):
            history = self.get_history(history)
        messages: Sequence[AgentMessage] = history
        users = [m.content for m in messages if is_role(m, "user")][-turns:]
        if mode == "follow-up":
            # The utterance first: keyword recall reads a query's first words (MAX_QUERY_TERMS)
            # and an embedder its first tokens, and a long earlier turn must not push it out.
            return " ".join([utterance, *_leaned_on(users)]).strip()
        return " ".join([*users, utterance]).strip()

    def _recalled(self, utterance: str, session_id: str, parts: ContextParts, window: list[AgentMessage],
                  max_tokens: int | None) -> str:
        if not utterance:
            return ""
        query = parts.query if parts.query is not None else self.build_query(utterance, parts.query_history())
        hits = self.turn_recall(query, session_id, window, parts.blocks)
        budget = None if max_tokens is None else max(
            0, max_tokens - estimate_tokens(self.injection.header) - _BLOCK_OVERHEAD_TOKENS)
        return render_hits(hits, self.style, budget, utterance)
