"""Safety checks on facts a model proposes: no instructions, and (opt-in) only the user's words.

``entity`` always drops a fact that reads like an instruction, and with ``grounded_facts: true``
also one whose key words are not in what the *user* said, so text from the assistant (or
injected into it) cannot become a fact.
"""
from __future__ import annotations

import re

from .fact_rules import MAX_FACT_CHARS, STOP_WORDS, WORD, normalise, wordset

__all__ = ["is_grounded", "looks_like_instruction"]

_META = wordset("""
user users s name named called call lives live living life likes like liked loves love hates hate enjoys enjoy
dislikes dislike prefers prefer works work working job favorite favourite years year old age has have is are
was fact facts does not doesn don t from comes come moved his her their they he she them usuário usuario nome
gosta mora vive trabalha nombre usuaria gusta nutzer benutzer heißt utilisateur
""") | STOP_WORDS
_INSTRUCTION = re.compile(
    r"(?i)\b(ignore|disregard|forget|override)\b.{0,40}\b(instructions?|previous|above|prompt|rules|context)\b"
    r"|\bsystem\s+prompt\b|\byou\s+(?:are\s+now|must|should\s+always|will\s+now)\b|\bas\s+an?\s+ai\b"
    r"|\bjailbreak|<\|[a-z_]+\|>|\[/?inst\]|\bassistant\s*:"
)


def looks_like_instruction(text: str) -> bool:
    """True for text that tries to steer the model ("ignore previous instructions", role tags)."""
    return bool(_INSTRUCTION.search(text))


def _stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s"):
        word = word[:-1]
    return word[:5]


def is_grounded(fact: str, user_text: str) -> bool:
    """Whether ``fact``'s key words come from ``user_text`` (what the user said).

    Names and numbers must all appear; of the other content words, at least half (compared
    by a five-letter stem, so "dogs" matches "dog" and "loves" matches "love").
    """
    if not fact or len(fact) > MAX_FACT_CHARS or looks_like_instruction(fact):
        return False
    said = {_stem(w) for w in WORD.findall(normalise(user_text).casefold())}
    words = WORD.findall(normalise(fact))
    tokens = [w for w in words if w.casefold() not in _META]
    if not tokens:
        return False
    # Capitals mark names, except the first word of the fact (capitalised as a sentence).
    strict = [w for i, w in enumerate(words) if w in tokens and ((i and w[:1].isupper()) or w.isdigit())]
    if any(_stem(w.casefold()) not in said for w in strict):
        return False
    hits = sum(1 for w in tokens if _stem(w.casefold()) in said)
    return hits * 2 >= len(tokens)
