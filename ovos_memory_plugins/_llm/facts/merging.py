"""A set of facts with their history: merging new facts, superseding changed ones.

The state is a plain dict, the shape entity's records have had all along, so the reference
package reads its ``facts``::

    {"facts": ["User lives in Porto", ...],              # active, injected (a list of strings)
     "meta": {"User lives in Porto": {"attribute": "home_city", "subject": "porto", ...}},
     "history": [{"text": "User lives in Lisbon", ..., "superseded_by": "User lives in Porto"}]}

:func:`merge` adds facts: a repeat is ignored, a change supersedes what it changes (the rules
are in :mod:`~ovos_memory_plugins._llm.facts.kinds`) and the old fact moves to ``history``.
:func:`withdraw_denied` reads an utterance, without any model, for a denial of a stored fact
("I don't like jazz anymore", "I left Santa Maria", "I'm not vegan any more") and turns that
fact into its negation, the old one kept in the history.

    >>> from .rules import extract_facts
    >>> state = merge({}, extract_facts("I live in Lisbon"), "s", 0, "rules")
    >>> state = merge(state, extract_facts("I moved from Lisbon to Porto"), "s", 0, "rules")
    >>> state["facts"], [h["text"] for h in state["history"]]
    (['User lives in Porto'], ['User lives in Lisbon'])
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .kinds import ATTRIBUTES, STOP_WORDS, is_single_valued, statement, subject_of
from .rules import Fact, make_fact, model_fact, normalise

__all__ = ["add_history", "fact_of", "MAX_HISTORY", "merge", "withdraw_denied", "without_fact"]

#: Superseded facts kept per record (export shows them; they are never injected).
MAX_HISTORY = 100

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def fact_of(state: Mapping[str, Any], text: str) -> Fact:
    """The stored fact ``text`` with what it is about (read from the text when ``meta`` lacks it:
    a file written by the reference or by an older version)."""
    meta = (state.get("meta") or {}).get(text)
    if isinstance(meta, Mapping) and meta.get("attribute"):
        return Fact(text, str(meta.get("key") or ""), str(meta.get("value") or ""), str(meta["attribute"]),
                    str(meta.get("subject") or ""), bool(meta.get("negated")), str(meta.get("said") or ""))
    return make_fact(text)


def _same_thing(old: Fact, new: Fact) -> bool:
    """Whether ``new`` is about what ``old`` is about (so it repeats or replaces it)."""
    if old.key.startswith("text:") or new.key.startswith("text:"):
        return old.key == new.key
    if is_single_valued(old.kind) or is_single_valued(new.kind):
        return old.kind == new.kind
    a, b = subject_of(old.subject), subject_of(new.subject)
    if not a or not b or not (a <= b or b <= a):
        return False
    # One attribute: a restatement ("Japan" -> "Japan, October 3rd"). Across attributes only a
    # change of mind: the model's "music: not jazz" withdraws the rules' "User loves jazz".
    return old.kind == new.kind or old.negated != new.negated


def _meta(fact: Fact, sid: str, now: float, source: str) -> dict[str, Any]:
    return {"key": fact.key, "value": fact.value, "attribute": fact.kind, "subject": fact.subject,
            "negated": fact.negated, "said": fact.said, "sid": sid, "ts": now, "source": source}


def merge(state: Mapping[str, Any], found: Iterable[Fact], sid: str, max_facts: int, source: str,
          now: float | None = None) -> dict[str, Any]:
    """``state`` with ``found`` added: repeats ignored, changes superseded, at most ``max_facts`` (0: all).

    Returns a new dict (the caller's is not changed) with ``facts``, ``meta`` and ``history``,
    and any other keys ``state`` had.
    """
    now = time.time() if now is None else now
    facts = [str(f) for f in state.get("facts") or []]
    known = {text: fact_of(state, text) for text in facts}
    meta = {text: dict((state.get("meta") or {}).get(text) or {}) for text in facts}
    history = list(state.get("history") or [])
    for fact in found:
        if any(text.casefold() == fact.text.casefold() for text in facts):
            continue
        rivals = [text for text in facts if _same_thing(known[text], fact)]
        if any(known[t].kind == fact.kind and known[t].subject == fact.subject and known[t].negated == fact.negated
               for t in rivals):
            continue  # the same thing said again, in other words
        for old in rivals:
            facts.remove(old)
            old_meta = meta.pop(old)
            entry = {**_meta(known.pop(old), str(old_meta.get("sid") or sid), now, ""), **old_meta}
            entry.update(text=old, superseded_at=now, superseded_by=fact.text)
            history.append(entry)
        facts.append(fact.text)
        known[fact.text] = fact
        meta[fact.text] = _meta(fact, sid, now, source)
    if max_facts and len(facts) > max_facts:
        for old in facts[:-max_facts]:
            meta.pop(old, None)
        facts = facts[-max_facts:]
    return {**state, "facts": facts, "meta": meta, "history": history[-MAX_HISTORY:]}


def add_history(state: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``state`` with superseded facts from elsewhere (an import) added to its history, in the order
    they were superseded; one already there (the same text superseded at the same time) is not."""
    history = list(state.get("history") or [])
    seen = {(h.get("text"), h.get("superseded_at")) for h in history if isinstance(h, Mapping)}
    new = [dict(e) for e in entries if (e.get("text"), e.get("superseded_at")) not in seen]
    if not new:
        return dict(state)
    history += new
    history.sort(key=_superseded_at)
    return {**state, "history": history[-MAX_HISTORY:]}


def _superseded_at(entry: Any) -> float:
    when = entry.get("superseded_at") if isinstance(entry, Mapping) else None
    return float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else 0.0


# -- denials, without a model ----------------------------------------------------------------------
_DENIAL = (r"(?:not|no longer|never|don't|dont|do not|doesn't|does not|didn't|stopped|quit|left|gave up|n[ãa]o|"
           r"j[áa] n[ãa]o|deixei de)")
_LATER = r"(?:anymore|any more|no more|j[áa] n[ãa]o)"
# Words that may stand between a denial and the thing denied ("don't *like* jazz", "no longer *work at*
# Santa Maria"); any other ("don't *know if* Porto...") means the denial is about something else.
_BETWEEN = (r"(?:\s+(?:like|love|eat|eating|live|living|in|at|work|working|for|listen|listening|to|into|play|"
            r"playing|a|an|the|do|doing|go|going|have|own|with|being|am|be|been|really|even|gosto|de|do|da|como|sou|"
            r"moro|em|trabalho|no|na))")
#: Attributes a denial can withdraw (a name or an age is changed by a new value, not denied).
_DENIABLE = frozenset(ATTRIBUTES) - {"name", "age", "birthday"} | {"pref", "is", "allergy", "food"}


_MAY_DENY = re.compile(rf"\b(?:{_DENIAL}|{_LATER})")


def _denies(text: str, word: str) -> bool:
    w = re.escape(word)
    return bool(re.search(rf"\b{_DENIAL}{_BETWEEN}{{0,2}}\s+{w}\b", text)
                or re.search(rf"\b{w}\b{_BETWEEN}{{0,2}}\s+{_LATER}", text))


def withdraw_denied(state: Mapping[str, Any], user: str, sid: str, now: float | None = None) -> dict[str, Any]:
    """``state`` with every stored fact the utterance denies turned into its negation (old one in history)."""
    text = normalise(user).casefold()
    if not _MAY_DENY.search(text):
        return dict(state)  # most turns deny nothing: no scan of every stored fact
    denials = []
    for stored in state.get("facts") or []:
        fact = fact_of(state, str(stored))
        if fact.negated or fact.kind not in _DENIABLE:
            continue
        words = [w for w in _WORD.findall(fact.subject.casefold()) if len(w) >= 3 and w not in STOP_WORDS]
        if any(_denies(text, w) for w in words):
            value = fact.said or fact.subject
            denials.append(model_fact(fact.kind, value, True, statement(fact.kind, value, True)))
    return merge(state, denials, sid, 0, "denied", now) if denials else dict(state)


def without_fact(state: Mapping[str, Any], text: str, sid: str | None = None) -> tuple[dict[str, Any], int]:
    """``state`` with the fact ``text`` gone everywhere it is kept: the active facts, their
    metadata (the user's words included), the history of superseded facts, and the
    ``superseded_by`` of an older fact that names it; and how many facts held it. With ``sid``,
    only where session ``sid`` stated it (the shared record of ``scope: global``).

    >>> from .rules import extract_facts
    >>> state = merge({}, extract_facts("I live in Lisbon"), "s", 0, "rules")
    >>> state = merge(state, extract_facts("I moved from Lisbon to Porto"), "s", 0, "rules")
    >>> kept, removed = without_fact(state, "User lives in Porto")
    >>> removed, kept["facts"], "User lives in Porto" in str(kept)
    (1, [], False)
    """
    facts = [str(f) for f in state.get("facts") or []]
    meta = dict(state.get("meta") or {})
    history = [h for h in state.get("history") or [] if isinstance(h, Mapping)]
    active = text in facts and (sid is None or (meta.get(text) or {}).get("sid") == sid)
    kept_facts = [f for f in facts if not (active and f == text)]
    kept_history = [h for h in history if h.get("text") != text or (sid is not None and h.get("sid") != sid)]
    if text not in kept_facts and all(h.get("text") != text for h in kept_history):
        # gone everywhere: an older fact no longer names it as what replaced it
        kept_history = [{k: v for k, v in h.items() if not (k == "superseded_by" and v == text)}
                        for h in kept_history]
    kept = {**state, "facts": kept_facts,
            "meta": {k: v for k, v in meta.items() if not (active and k == text)}, "history": kept_history}
    return kept, len(facts) - len(kept["facts"]) + len(history) - len(kept_history)
