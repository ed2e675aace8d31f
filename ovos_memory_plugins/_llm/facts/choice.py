"""Which stored facts a turn sends: the few that say who the user is, always; the rest on merit.

Sending every fact on every turn spends the shared ``max_added_tokens`` budget before recall
gets any: with a few dozen facts, the recalled exchange that answers the question no longer
fits. So a turn gets

* the *core* facts (the user's name and home city), whatever was asked: a persona needs them
  to address the user at all;
* then the facts sharing a content word with the utterance, most shared words first (ties: the
  newer fact first), at most ``limit`` of them.

    >>> facts = ["User's name is Ana", "User likes jazz", "User's pet: cat called Miso"]
    >>> choose_facts(facts, "what music do I like? jazz?", limit=3)
    ["User's name is Ana", 'User likes jazz']
"""
from __future__ import annotations

from collections.abc import Sequence

from ..._index.stopwords import StopWords, content_words
from .kinds import read_statement, singular, statement

__all__ = ["CORE_ATTRIBUTES", "choose_facts", "is_core_fact"]

#: The attributes a turn always carries: who the user is and where they live.
CORE_ATTRIBUTES = ("name", "home_city")
#: The sentences the facts store writes for them, up to the value ("User lives in").
_CORE_OPENINGS = tuple(statement(a, "").strip() + " " for a in CORE_ATTRIBUTES)
#: Words every fact sentence holds: they say nothing about what a fact is about.
_FACT_WORDS = frozenset({"user", "users", "s"})


def is_core_fact(fact: str) -> bool:
    """Whether ``fact`` states one of :data:`CORE_ATTRIBUTES` (in any wording the store writes)."""
    if fact.startswith(_CORE_OPENINGS):
        return True
    read = read_statement(fact)
    return read is not None and read[0] in CORE_ATTRIBUTES and not read[2]


def _words(text: str, ignore: frozenset[str]) -> frozenset[str]:
    return frozenset(singular(w) for w in content_words(text, ignore))


def choose_facts(facts: Sequence[str], utterance: str, limit: int) -> list[str]:
    """The core facts, then up to ``limit`` others sharing a content word with ``utterance``
    (most shared first, the newer first on a tie), in the order they are stored."""
    # The utterance's language says which words are function words, in the facts too ("son").
    ignore = StopWords().for_text(utterance) | _FACT_WORDS
    asked = _words(utterance, ignore)
    core = {i for i, fact in enumerate(facts) if is_core_fact(fact)}
    shared = {i: len(asked & _words(fact, ignore)) for i, fact in enumerate(facts) if i not in core}
    ranked = sorted((i for i, n in shared.items() if n > 0), key=lambda i: (-shared[i], -i))
    chosen = core | set(ranked[:limit])
    return [fact for i, fact in enumerate(facts) if i in chosen]
