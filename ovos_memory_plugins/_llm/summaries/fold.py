"""Rolling summaries that keep the facts: built incrementally, bounded, checked before they are used.

Asked to rewrite a whole summary from the old one and new turns, a small model drops what it
does not repeat: measured with a 0.5B model, the summary after the user moved kept the old city
and lost the move, the new workplace, a trip and a friend. So the model never rewrites the
whole summary here. The summary has two parts::

    Facts about the user:
    - User lives in Porto
    - User works at São João hospital
    ...
    Conversation so far: <a few sentences, the newest kept>

* **The facts** come from the fact extraction of the folded exchanges, one per request (the
  request entity sends for the same exchange: on a shared endpoint it is answered once)
  (:mod:`~ovos_memory_plugins._llm.facts.extraction`), merged with supersession
  (:mod:`~ovos_memory_plugins._llm.facts.merging`): old facts stay until the user changes them, and
  the old value of a change moves to the history. Without a model, the offline rules.
* **The narrative**: one request writes a few sentences about both sides of the folded turns
  (``user: ...`` / ``assistant: ...`` lines, small talk left out), saying who said what. A fold
  with the model covers the oldest exchanges that request holds (at most
  :data:`MAX_MODEL_EXCHANGES`, all of them read by the model); the caller folds a longer backlog
  in several steps, so no turn leaves the record unread. The assistant's recommendations and
  promises the sentences leave out are added ("The assistant said: I recommend ..."). Code appends the piece to the old
  narrative, drops repeated sentences and sentences that state a value the user has since
  changed, and drops the oldest sentences past the budget. Without a model, the most
  informative statements (:func:`~ovos_memory_plugins._llm.summaries.text.extractive_summary`).
* **Checks** (:mod:`~ovos_memory_plugins._llm.summaries.checks`): a narrative that reads like a
  greeting, copies the transcript, holds control characters or names mostly what nobody said,
  and a summary that loses most of the names it should keep, are not committed:
  :attr:`Fold.rejected` says why, and the caller keeps its old state and tries again later (with
  more turns, a different request).

Every request fits the endpoint's context (:meth:`~ovos_memory_plugins._llm.client.ChatClient.fits`);
an overflow error teaches the client the real size and the request is rebuilt smaller.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._core.log import LOG
from ..._core.tokens import estimate_tokens, truncate_to_tokens
from ..._core.untrusted import steers
from ...errors import LLMContextOverflow, LLMError
from ..facts.extraction import exchanges_of, extract, is_small_talk
from ..facts.merging import fact_of, merge, withdraw_denied
from ..facts.rules import Fact, extract_facts, normalise
from ..facts.secrets import holds_secret, secrets_given
from .checks import (
    MAX_REQUIRED,
    check_piece,
    check_summary,
    is_about,
    named_entities,
    names_in,
    names_required,
    names_said,
    trim_to_sentence,
    user_statements,
    without_preamble,
)
from .text import extractive_summary, one_line_said, role_content, split_sentences

if TYPE_CHECKING:
    from ..client import ChatClient

__all__ = ["FACTS_HEADER", "NARRATIVE_HEADER", "Fold", "FoldStopped", "Summarizer", "parse_summary", "render_summary"]

FACTS_HEADER = "Facts about the user:"
NARRATIVE_HEADER = "Conversation so far:"
#: Facts kept in a summary (the oldest go first past this).
MAX_SUMMARY_FACTS = 40
#: max_tokens of one extraction request.
EXTRACT_TOKENS = 192
#: Exchanges read by one extraction request (a fold of more sends several). One, as entity sends
#: them: the same request on the same endpoint is answered once for both memories (the replies
#: are cached), and a 0.5B model read a batch worse (6 exchanges gave no fact; 3 lost a move and a
#: new workplace on the 30-exchange script).
EXCHANGES_PER_REQUEST = 1
#: Exchanges one fold reads with the model (a backlog is folded in several steps).
MAX_MODEL_EXCHANGES = 24
#: The narrative's reply gets at most this fraction (1/n) of the model's context.
NARRATIVE_CONTEXT_SHARE = 4

NARRATIVE_PROMPT = (
    "You summarize part of a conversation between a user and an assistant in two or three short sentences. "
    "Keep what the user said, did or plans, and what the assistant recommended, promised or answered, with "
    'names, titles and places. Say who said what ("The user ...", "The assistant ..."), and never put one '
    "side's words in the other's mouth. Reply with the summary only."
)
# The offline narrative quotes the turns ("User: ..."): such a line stays on a line of its own.
_QUOTED = re.compile(r"^(?:User|Assistant|System|Tool|Developer): ")
_PAST = re.compile(r"(?i)\b(used to|previous(ly)?|former(ly)?|moved|no longer|anymore|left|before|stopped|not|"
                   r"don'?t|doesn'?t|changed|switched|quit)\b")


@dataclasses.dataclass(frozen=True)
class Fold:
    """What folding some turns gave.

    Attributes:
        summary: the new summary text (the old one when rejected).
        state: its structured form (facts, their history, the narrative), for stores that keep it.
        source: "llm" (the model wrote the narrative), or "extractive" (no model answered).
        rejected: why the model's summary was not used (the caller keeps its old state), or None.
        folded: how many of the leading messages given this fold covers (None: all of them); the
            caller keeps the others for a next fold.
        dropped: what the summary's bound left out (its oldest sentences and facts), which the
            checks do not count as lost.
    """

    summary: str
    state: dict[str, Any]
    source: str
    rejected: str | None = None
    folded: int | None = None
    dropped: tuple[str, ...] = ()


class FoldStopped(Exception):
    """The fold's ``stop`` check said to stop before its next model request (the session was
    forgotten): nothing is folded, and the caller commits nothing."""


def _no_stop() -> bool:
    return False


def parse_summary(text: str) -> dict[str, Any]:
    """The structured state of a summary text this module wrote; any other text is all narrative."""
    text = (text or "").strip()
    if not text.startswith(FACTS_HEADER):
        return {"facts": [], "meta": {}, "history": [], "narrative": text}
    head, _, narrative = text.partition(NARRATIVE_HEADER)
    facts = [line[2:].strip() for line in head.splitlines()[1:] if line.startswith("- ") and line[2:].strip()]
    return {"facts": facts, "meta": {}, "history": [], "narrative": narrative.strip()}


def render_summary(state: Mapping[str, Any], max_tokens: int) -> str:
    """The summary text of ``state``, within ``max_tokens``: the oldest narrative sentences go first,
    then the oldest facts."""
    facts = [str(f) for f in state.get("facts") or []]
    sentences = split_sentences(str(state.get("narrative") or ""))

    def text() -> str:
        parts = [FACTS_HEADER + "\n" + "\n".join(f"- {f}" for f in facts)] if facts else []
        if sentences:
            parts.append(f"{NARRATIVE_HEADER} {_join(sentences)}" if facts else _join(sentences))
        return "\n".join(parts)

    while estimate_tokens(text()) > max_tokens and sentences:
        sentences.pop(0)
    while estimate_tokens(text()) > max_tokens and facts:
        facts.pop(0)
    return text()


def _value_parts(value: str) -> list[str]:
    """"Santa Maria hospital, paediatrics" -> both parts, folded."""
    return [p.strip() for p in normalise(value).casefold().split(",") if len(p.strip()) >= 3]


#: The most words of a reply read as an acknowledgement ("Noted, a lovely city."), which goes
#: with the statement it answers when that is dropped; a longer one may say something of its own.
ACKNOWLEDGEMENT_WORDS = 12


def roll_narrative(old: str, piece: str, state: Mapping[str, Any], max_tokens: int) -> str:
    """``old`` then ``piece``, without repeated sentences, without sentences stating a value the
    user has changed (unless they say it changed), the oldest dropped past ``max_tokens``."""
    current: dict[str, set[str]] = {}
    stale: dict[str, str] = {}
    facts = [fact_of(state, str(t)) for t in state.get("facts") or []]
    for fact in facts:
        if not fact.negated:
            current.setdefault(fact.kind, set()).update(_value_parts(fact.said or fact.subject))
    now = set().union(*current.values()) if current else set()
    for entry in state.get("history") or []:
        for part in _value_parts(str(entry.get("said") or entry.get("subject") or "")):
            if part not in now:
                stale[part] = str(entry.get("attribute") or "")
    for fact in facts:  # a value the user now denies is stale wherever a sentence states it
        if fact.negated:
            stale.update({p: fact.kind for p in _value_parts(fact.said or fact.subject) if p not in now})
    kept: list[str] = []
    answering_stale = False  # the assistant's acknowledgement of a dropped "User: ..." line goes with it
    for sentence in [*split_sentences(old), *split_sentences(piece)]:
        # An order to the model, as no fact may hold one; an offline narrative's "User: ..." line is
        # judged by its words, and one already quoted as said ("User: (quoted) ...") stays so.
        label = _QUOTED.match(sentence)
        said = sentence[label.end():] if label else sentence
        if not said.startswith("(quoted) ") and steers(said):
            continue
        low = normalise(sentence).casefold()
        hits = [a for v, a in stale.items() if re.search(r"\b" + re.escape(v) + r"\b", low)]
        # "moved from Lisbon to Porto" names the current value too: it stays.
        if hits and not _PAST.search(sentence) and not all(any(c in low for c in current.get(a, ())) for a in hits):
            answering_stale = answering_stale or sentence.startswith("User: ")
            continue
        if answering_stale:
            answering_stale = False
            # Only a short reply right after it: its acknowledgement ("Assistant: Noted, a lovely
            # city."). The summary leaves small talk out, so what follows may answer another turn.
            if sentence.startswith("Assistant: ") and len(sentence.split()) <= ACKNOWLEDGEMENT_WORDS:
                continue
        if sentence and sentence not in kept:
            kept.append(sentence)
    while len(kept) > 1 and estimate_tokens(_join(kept)) > max_tokens:
        kept.pop(0)
    if kept and estimate_tokens(kept[0]) > max_tokens:  # one sentence longer than the budget: its start
        kept = [truncate_to_tokens(kept[0], max_tokens)]
    return _join(kept)


def _join(sentences: list[str]) -> str:
    out = ""
    for sentence in sentences:
        out += ("\n" if out and (_QUOTED.match(sentence) or out.endswith("\n")) else " " if out else "") + sentence
    return out


#: What the assistant recommends or promises: the user may ask about it later ("which book was it?").
_COMMITMENT = re.compile(r"\b(?:I|we)\s+(?:would\s+|'d\s+)?(?:recommend|suggest)\b|\b(?:I|we)(?:'ll|\s+will)\s+"
                         r"(?:remind|send|call|book|check|add|set|order|text|email|note)\b", re.IGNORECASE)
MAX_COMMITMENTS = 2


def commitments_missing(messages: Sequence[Any], narrative: str) -> list[str]:
    """The assistant's recommendations and promises in ``messages`` whose names ``narrative``
    leaves out, as sentences to add ("The assistant said: I recommend ..."): a summary that lost
    the title of a recommended book cannot answer "which book was it?"."""
    named = named_entities(narrative)
    out = []
    for role, text in map(role_content, messages):
        if role != "assistant":
            continue
        for sentence in split_sentences(" ".join(text.split())):
            names = named_entities(sentence)
            if _COMMITMENT.search(sentence) and names and not names <= named:
                out.append(f"The assistant said: {trim_to_sentence(sentence)}")
    return out[-MAX_COMMITMENTS:]


def statements_missing(messages: Sequence[Any], summary: str, everything: bool = False) -> list[str]:
    """The user's sentences in ``messages`` naming what ``summary`` leaves out, as sentences to
    add ("The user said: ..."): as few as make it keep the share of the names the checks ask for
    (``everything``: every name, up to :data:`MAX_REQUIRED`), those naming most first. A small
    model asked for a few sentences about two dozen exchanges named one place of thirteen; the
    fold then kept failing, and the turns stayed unfolded."""
    said, have = names_said(messages), names_in(summary)
    sentences = [trim_to_sentence(s) for text in user_statements(messages)
                 for s in split_sentences(" ".join(text.split()))]
    required = min(len(said), MAX_REQUIRED) if everything else names_required(said)
    out = []
    while len(said & have) < required:
        best = max(sentences, key=lambda s: len((names_in(s) & said) - have), default="")
        gain = (names_in(best) & said) - have
        if not gain:
            break
        out.append(f"The user said: {best}")
        have |= gain
        sentences.remove(best)
    return out


class Summarizer:
    """Folds turns into a summary; one per memory (it holds no session state).

    Args:
        client: the chat client, or None for the offline summary only.
        max_tokens: the summary's bound (``max_summary_tokens``).
    """

    def __init__(self, client: ChatClient | None, max_tokens: int):
        self.client = client
        self.max_tokens = max_tokens

    def fold(self, previous: str, state: Mapping[str, Any] | None, messages: Sequence[Any],
             narrate: bool = True, stop: Callable[[], bool] = _no_stop) -> Fold:
        """Fold the oldest of ``messages`` into the summary ``previous`` (with its ``state`` when it was kept).

        With a model, the fold covers the oldest exchanges that one narrative request holds (at
        most :data:`MAX_MODEL_EXCHANGES`): :attr:`Fold.folded` says how many messages, and the
        caller folds the rest in a next step, so no turn is summarised unread. Without one, all of
        ``messages``. ``narrate=False`` writes the narrative without the model (after its
        summaries were rejected too often); the facts still come from the model when it answers.
        ``stop`` is asked before each model request; true, the fold raises :class:`FoldStopped`.
        """
        base = dict(state) if state and render_summary(state, self.max_tokens) == (previous or "").strip() \
            else parse_summary(previous)
        # The narrative reads the turns without the secrets in them; the facts read them whole (a
        # fact holding a secret is dropped there), so "I'm Marta, my PIN is 4321" keeps the name.
        whole = list(messages)
        given = _secrets_given([role_content(m) for m in whole])
        messages = without_secrets(whole, given)
        use_model = self.client is not None and self.client.available
        part, piece, narrated = list(messages), "", False
        if use_model:
            try:
                if stop():
                    raise FoldStopped
                part, piece = self._narrated_prefix(messages, narrate)
                narrated = narrate
            except LLMError:
                use_model = False  # the client logged it once
                part = list(messages)
        updated, use_model = self._facts(base, whole[:len(part)], use_model, stop)
        if not (use_model and narrated):
            budget = self._narrative_budget(updated)
            narrative = extractive_summary(str(base.get("narrative") or ""), part, budget)
            updated["narrative"] = roll_narrative(narrative, "", updated, budget)
            return Fold(render_summary(updated, self.max_tokens), updated, "extractive", folded=len(part))
        said = "\n".join(_spoken(part, small_talk=True))
        piece = _without_given_secrets(piece, given)
        why = check_piece(piece, said) if said else None  # nothing said at all
        if why is None:
            piece = " ".join([piece, *commitments_missing(part, piece)])
            # Before the model's sentences: past the bound the oldest go first, and its overview stays.
            # A piece sharing no word with the turns (junk, a placeholder) covers none of them.
            piece = " ".join([*statements_missing(part, f"{render_summary(updated, 1 << 30)}\n{piece}",
                                                  everything=not is_about(piece, said)), piece])
            old = str(base.get("narrative") or "")
            unbounded = render_summary({**updated, "narrative": roll_narrative(old, piece, updated, 1 << 30)}, 1 << 30)
            updated["narrative"] = roll_narrative(old, piece, updated, self._narrative_budget(updated))
            summary = render_summary(updated, self.max_tokens)
            # The checks judge what the model changed, not what the bound drops by design (the
            # oldest sentences, then the oldest facts): a full summary would otherwise never roll.
            dropped = tuple(s for s in split_sentences(unbounded) if s not in summary)
            changed = [str(h.get("said") or h.get("text") or "") for h in updated.get("history") or []]
            why = check_summary(summary, previous, part, [*changed, *dropped])
            if why is None:
                return Fold(summary, updated, "llm", folded=len(part), dropped=dropped)
        # The reason names the check, never what the model wrote: it reaches degraded() and the log,
        # which must hold nothing of the conversation (forget could not reach it there).
        LOG.debug("summary rejected (%s)", why)
        return Fold(previous, dict(base), "llm", why, folded=len(part))

    # -- the facts --------------------------------------------------------------------------------
    def _facts(self, state: dict[str, Any], messages: Sequence[Any], use_model: bool,
               stop: Callable[[], bool] = _no_stop) -> tuple[dict[str, Any], bool]:
        """The facts of the folded exchanges merged into ``state``, in the order they were said: by
        the model (the newest :data:`MAX_MODEL_EXCHANGES`, one per request), else by the rules."""
        exchanges = exchanges_of(messages)
        by_model = len(exchanges) - MAX_MODEL_EXCHANGES
        found: dict[int, list[Fact]] = {}
        for start in range(max(0, by_model), len(exchanges), EXCHANGES_PER_REQUEST):
            if not use_model:
                break
            batch = exchanges[start:start + EXCHANGES_PER_REQUEST]
            if stop():
                raise FoldStopped
            try:
                for index, fact in extract(self.client, batch, EXTRACT_TOKENS):  # type: ignore[arg-type]
                    found.setdefault(start + index, []).append(fact)
            except LLMError:
                use_model = False
            else:
                found.update({start + i: found.get(start + i, []) for i in range(len(batch))})
        for index, exchange in enumerate(exchanges):
            state = withdraw_denied(state, exchange.user, "")
            by_rules = index not in found
            state = merge(state, extract_facts(exchange.user) if by_rules else found[index], "", MAX_SUMMARY_FACTS,
                          "rules" if by_rules else "extracted")
        return state, use_model

    def _narrative_budget(self, state: Mapping[str, Any]) -> int:
        facts = render_summary({"facts": state.get("facts") or []}, 1 << 30)
        # What the facts leave of max_summary_tokens: a larger bound keeps more of the narrative.
        return max(48, self.max_tokens - estimate_tokens(facts))

    # -- the narrative ------------------------------------------------------------------------------
    def _narrated_prefix(self, messages: Sequence[Any], narrate: bool) -> tuple[list[Any], str]:
        """The oldest exchanges of ``messages`` one fold reads with the model, and (``narrate``)
        the model's few sentences about both sides of them (small talk too when nothing else was
        said; "" when nothing was)."""
        client = self.client
        assert client is not None
        # The reply asks for max_summary_tokens (the reference's max_tokens of a summary) where the
        # context has room; the exchanges read are chosen leaving at most a share of the context to
        # it, so a bound set for the stored summary (thousands of tokens) does not cut a fold down
        # to one exchange per request.
        for _ in range(3):  # an overflow teaches the client the real context; then it is rebuilt smaller
            reserve = min(self.max_tokens, client.context_limit() // NARRATIVE_CONTEXT_SHARE)
            spans = _exchange_spans(messages)[:MAX_MODEL_EXCHANGES]
            end = spans[-1][1] if spans else len(messages)
            if not narrate:
                return list(messages[:end]), ""
            lines: list[str] = []
            for index, (first, stop) in enumerate(spans):
                more = _spoken(messages[first:stop])
                if index and not client.fits(_narrative_request([*lines, *more]), reserve):
                    end = first
                    break
                lines += more
            part = list(messages[:end])
            # Only small talk: the model still writes its line (as the reference asked it), so no
            # exchange vanishes from the summary.
            lines = lines or _spoken(part, small_talk=True)
            if not lines:
                return part, ""
            request = _narrative_request(lines)
            if not client.fits(request, reserve):  # one exchange too long for the context: its start
                room = int(client.context_limit() / 1.1) - client.estimate_prompt(_narrative_request([])) - reserve
                request = _narrative_request([truncate_to_tokens("\n".join(lines), max(16, room))])
            max_tokens = min(self.max_tokens, max(reserve, client.reply_room(request)))
            try:
                return part, trim_to_sentence(without_preamble(client.chat(request, max_tokens=max_tokens).text))
            except LLMContextOverflow as exc:
                if not exc.limit:
                    raise
        raise LLMError("the narrative request did not fit the model's context")


def _without_given_secrets(piece: str, given: frozenset[str]) -> str:
    """The model's ``piece`` without its sentences holding a secret (a PIN, a password, or one
    of ``given``, what the user gave): the request left them out, but a sentence the filter
    missed there ("my PIN's 4321") may come back in the model's words ("The user's PIN is 4321")."""
    sentences = split_sentences(piece)
    kept = [s for s in sentences if not holds_secret(s, given)]
    return piece if len(kept) == len(sentences) else " ".join(kept)


def without_secrets(messages: Sequence[Any], given: frozenset[str] | None = None) -> list[dict[str, str]]:
    """``messages`` without the sentences that name or hold a secret the user gave ("My wifi
    password is hunter2.", the assistant's "Your PIN 4321 is noted."): a summary is sent with
    every turn, as facts are, so it keeps none (see :mod:`~ovos_memory_plugins._llm.facts.secrets`);
    nor does the model asked to write its narrative receive them. A short reply to a message
    that held nothing else goes with it ("Noted." would answer nothing). ``given``: the secrets
    already read from ``messages`` (:func:`_secrets_given`), when the caller has them."""
    pairs = [role_content(m) for m in messages]
    given = _secrets_given(pairs) if given is None else given
    out = []
    emptied = False  # the last message was the user's, and it held nothing but secrets
    for role, content in pairs:
        secret = holds_secret(content, given)
        if secret:
            content = "\n".join(" ".join(s for s in split_sentences(line) if not holds_secret(s, given))
                                for line in content.splitlines())
        elif emptied and role == "assistant" and len(content.split()) <= ACKNOWLEDGEMENT_WORDS:
            content = ""
        emptied = secret and role == "user" and not content.strip()
        out.append({"role": role, "content": content})
    return out


def _secrets_given(pairs: Sequence[tuple[str, str]]) -> frozenset[str]:
    """What the user's messages of ``pairs`` (role, text) gave as secrets, each read with the
    assistant's message before it ("What's your password?" - "bluebird")."""
    given: set[str] = set()
    asked = ""
    for role, text in pairs:
        if role == "user":
            given |= secrets_given(text, asked)
        asked = text if role == "assistant" else ""
    return frozenset(given)


def _exchange_spans(messages: Sequence[Any]) -> list[tuple[int, int]]:
    """(first, stop) message indices of each exchange: a user message and what follows it up to
    the next one (messages before the first user message belong to the first span)."""
    starts = [i for i, (role, text) in enumerate(map(role_content, messages)) if role == "user" and text.strip()]
    if not starts:
        return [(0, len(messages))] if messages else []
    starts[0] = 0
    return list(zip(starts, [*starts[1:], len(messages)]))


def _spoken(messages: Sequence[Any], small_talk: bool = False) -> list[str]:
    """The narrative request's lines of ``messages``: both sides, small talk left out unless asked for."""
    return [f"{role}: " + one_line_said(text) for role, text in map(role_content, messages)
            if role in ("user", "assistant") and text.strip() and (small_talk or not is_small_talk(text))]


def _narrative_request(lines: list[str]) -> list[dict[str, str]]:
    """The instruction, then the turns as the reference sends them ("New conversation:" and
    ``role: content`` lines)."""
    return [{"role": "system", "content": NARRATIVE_PROMPT},
            {"role": "user", "content": "New conversation:\n" + "\n".join(lines) + "\n"}]
