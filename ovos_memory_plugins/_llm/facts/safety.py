"""Safety checks on facts a model proposes: no instructions, and only the user's words.

``entity`` always drops a fact that reads like an instruction. A value the built-in extraction
returns must be in the *user's* own words (:func:`snap_value`), so neither the assistant's reply
nor the prompt's examples can become a fact; a custom extraction prompt's sentences are checked
by :func:`is_grounded` with ``grounded_facts: true``.
"""
from __future__ import annotations

import difflib
import re

from ..._core.untrusted import steers
from .kinds import STOP_WORDS, plain, stem, wordset
from .rules import MAX_FACT_CHARS, WORD, normalise

__all__ = ["is_grounded", "snap_value", "steers"]

_META = wordset("""
user users s name named called call lives live living life likes like liked loves love hates hate enjoys enjoy
dislikes dislike prefers prefer works work working job favorite favourite years year old age has have is are
was fact facts does not doesn don t from comes come moved his her their they he she them usuário usuario nome
gosta mora vive trabalha nombre usuaria gusta nutzer benutzer heißt utilisateur
""") | STOP_WORDS
# Nouns a fact names its attribute with, after or without its value ("User likes Italian *food*",
# "Green is the user's favourite *colour*"): the value is the word before them.
_ATTRIBUTE_NOUNS = wordset("""
food foods cuisine dish dishes meal meals drink drinks colour color colours colors sport sports music song songs
band bands artist movie movies film films show shows series book books game games hobby hobbies pet pets animal
animals team teams language languages city country place places job genre type kind thing things stuff day
""")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
# Everyday words a model swaps for the user's own when it restates them ("I have two kids" ->
# "User has two children"): the words of a group stand for one another, whole words only
# ("motherboard" is no "mum").
_SAME_WORD = {word: f"#{i}" for i, group in enumerate((
    "kid kids child children kiddo kiddos",
    "mom moms mum mums mother mothers mommy mummy",
    "dad dads father fathers daddy",
)) for word in group.split()}


def _value_word(tokens: list[str]) -> str | None:
    """Where a fact's value is: its last content word that is no attribute noun nor an adverb
    ("User speaks Portuguese *fluently*"), an ordinal as its number ("3rd" is "3")."""
    for word in reversed(tokens):
        folded = word.casefold()
        if folded in _ATTRIBUTE_NOUNS or (len(folded) > 4 and folded.endswith("ly")):
            continue
        ordinal = _ORDINAL.match(folded)
        return ordinal.group(1) if ordinal else folded
    return None


def _stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s"):
        word = word[:-1]
    return word[:5]


def _term(word: str) -> str:
    """What a (case-folded) word is compared by: its group of words that stand for one another,
    else its five-letter stem."""
    return _SAME_WORD.get(word) or _stem(word)


def is_grounded(fact: str, user_text: str, context: str = "") -> bool:
    """Whether ``fact``'s key words come from ``user_text`` (what the user said).

    Names and numbers must all appear there; of the other content words, at least half, there
    or in ``context`` (the question the user answered: "favourite colour" in "What's your
    favourite colour?" / "Green"), compared by a five-letter stem, so "dogs" matches "dog" and
    "loves" matches "love", and a few everyday words stand for one another ("kids", "children").
    The word where a fact's value is (its last content word, past an attribute noun or an
    adverb: "User's dinner is a *pizza*") must be among them: a model rewords the attribute, and
    invents the value.
    """
    if not fact or len(fact) > MAX_FACT_CHARS or steers(fact):
        return False
    said = {_term(w) for w in WORD.findall(normalise(user_text).casefold())}
    heard = said | {_term(w) for w in WORD.findall(normalise(context).casefold())}
    words = WORD.findall(normalise(fact))
    tokens = [w for w in words if w.casefold() not in _META]
    if not tokens:
        return False
    # Capitals mark names, except the first word of the fact (capitalised as a sentence).
    strict = [w for i, w in enumerate(words) if w in tokens and ((i and w[:1].isupper()) or w.isdigit())]
    if any(_term(w.casefold()) not in said for w in strict):
        return False
    hits = sum(1 for w in tokens if _term(w.casefold()) in heard)
    value = _value_word(tokens)
    if hits * 2 < len(tokens) or (value is not None and _term(value) not in heard):
        return False
    # At least one word the user said: "User likes jazz" is no reading of "No." to "Do you like jazz?"
    return any(_term(w.casefold()) in said for w in tokens)


# -- values in the user's own words -------------------------------------------------------------
_GLUE = wordset("""
a an the to of in on at for with and or my your his her their our is are was be been am i me we you it this that
from as by de da do das dos em no na o os um uma e y el la los las en del
""")
#: How close a word must be to one the user said to stand for it ("Lisboa"/"Lisbon", "pediatrics"/"paediatrics").
SIMILAR = 0.8


def _close(said: list[str], word: str) -> str | None:
    target = plain(word)
    if len(target) < 4:
        return None
    return next((w for w in said if len(w) >= 4 and difflib.SequenceMatcher(None, plain(w), target).ratio() >= SIMILAR),
                None)


def snap_value(value: str, said: str) -> str | None:
    """``value`` in the user's own words, or None when the user did not say it.

    Each content word of ``value`` must match a word of ``said`` exactly, by a six-letter stem,
    or closely (:data:`SIMILAR`), and is replaced by the user's spelling. An unmatched lower-case
    word is dropped ("Japan *next* October"); an unmatched capitalised word or number (a name,
    a date) rejects the value, and so does matching fewer than half of the content words.
    Glue words at either end are trimmed.

        >>> snap_value("Lisboa", "I live in Lisbon")
        'Lisbon'
        >>> snap_value("Oslo", "I live in Lisbon") is None
        True
    """
    said_words = WORD.findall(normalise(said))
    by_stem: dict[str, str] = {}
    for word in said_words:
        by_stem.setdefault(stem(word), word)
    out: list[str] = []
    content = matched = 0
    for token in value.split():
        core = token.strip(".,;:!?\"'()")
        words = WORD.findall(core)
        if not words or all(w.casefold() in _GLUE for w in words):
            out.append(token)
            continue
        content += 1
        if len(words) == 1:
            hit = by_stem.get(stem(core)) or _close(said_words, core)
        else:  # "São-João", "e-mail": every part must have been said
            hit = core if all(stem(w) in by_stem for w in words) else None
        if hit is None:
            if core[:1].isupper() or any(c.isdigit() for c in core):
                return None
            continue
        matched += 1
        out.append(hit + ("," if token.endswith(",") else ""))
    if not content or matched * 2 < content:
        return None
    while out and all(w.casefold() in _GLUE for w in WORD.findall(out[0])):
        out.pop(0)
    while out and all(w.casefold() in _GLUE for w in WORD.findall(out[-1])):
        out.pop()
    return " ".join(out).rstrip(",") or None
