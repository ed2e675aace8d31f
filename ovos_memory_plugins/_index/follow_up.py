"""Whether an utterance leans on the turn before it, for ``retrieval.query_mode: follow-up``.

"Where does she live?" asked after "What's my sister's name?" searches for "live" alone: the
memory that answers it ("My sister Lena lives in Porto") shares no other word with it, and by
meaning "she" is nobody. A follow-up is searched with the user's turn before it folded in, as a
standalone question would have been worded. A question that names what it is about ("What did
Melanie paint?", "What's my name?") is searched as it is: folding in an unrelated earlier turn
would only add its words.

An utterance reads as a follow-up when

- it opens with a word that continues the turn before ("and tomorrow?", "what about Lisbon?",
  "e amanhã?", "y mañana?"), or
- it points back at someone or something said before (a third-person pronoun, "there", or
  "that" standing alone: "when was that?", not "that weekend") and names little else: no name
  (a capitalised word after the first: "What does Jon tell Gina he won't do?" is about Jon)
  and at most :data:`MAX_NAMED` words that are not function words.

Word lists cover the languages of keyword recall's stop words; comparison is without case and
diacritics, as the index reads words.
"""
from __future__ import annotations

import re
from functools import lru_cache

from .stopwords import WORD, StopWords, normalise_term, stopwords

__all__ = ["MAX_NAMED", "is_follow_up"]

#: Content words a pointing utterance may have and still lean on the turn before: "where does
#: she live" names one, "what did she paint last year" three, "how did they handle the
#: accident at work" more than a follow-up needs.
MAX_NAMED = 2

#: The first words of a follow-up, per language, compared in lower case with their accents:
#: Portuguese "É possível...?" and Italian "È aperto...?" ("is") are not "e" ("and").
_OPENERS = {
    "en": ("and", "what about", "how about", "also"),
    "pt": ("e", "também"),
    "es": ("y", "también"),
    "fr": ("et", "aussi"),
    "de": ("und", "was ist mit", "auch"),
    "it": ("e", "anche"),  # not "ed": "Ed Sheeran songs"
    "nl": ("en", "wat dacht je van", "ook"),
    "ca": ("i què", "també"),  # not "i" alone: English "I ..."
}
#: Pronouns that point back at a person (or a thing, "its") named before, anywhere in the turn.
_PERSONS = {
    "en": "he she they him her them his hers its their theirs",
    "pt": "ele ela eles elas dele dela deles delas",
    "es": "ella ellos ellas",  # not "él": without its accent, "el" is the article
    "fr": "elle ils elles lui leur leurs",  # not "il": "quelle heure est-il ?" points at nothing
    "de": "er sie ihm ihn ihr ihre ihnen seine seinen seinem seiner",  # not "sein": also "to be"
    "it": "lui lei loro",
    "nl": "hij zij ze hem haar hun",
    "ca": "ell ella ells elles",
}
#: Words that point back only as the turn's last word: "what about it?", "what did I do there?",
#: "when was that?"; not "is it raining?", "is there milk?", "did you know that I ...".
_LAST_POINTERS = {
    "en": "it there that those",  # not "this": "what song is this?" asks about now
    "pt": "ali isso isto aquilo",
    "es": "allí allá ahí eso esto aquello",
    "fr": "ça cela ceci",
    "de": "dort das dies",
    "it": "ciò quello questo",
    "nl": "daar dat dit",
    "ca": "allà això allò",
}

#: German's polite "you", capitalised wherever it stands.
_POLITE = frozenset({"Sie", "Ihr", "Ihre", "Ihnen", "Ihrem", "Ihren", "Ihrer"})

_STOP = StopWords()


@lru_cache(maxsize=1)
def _lists() -> tuple[frozenset[tuple[str, ...]], frozenset[str], frozenset[str], frozenset[str]]:
    def words(text: str) -> tuple[str, ...]:
        return tuple(normalise_term(w) for w in text.split())

    openers = frozenset(tuple(o.split()) for ws in _OPENERS.values() for o in ws)
    persons = frozenset(w for ws in _PERSONS.values() for w in words(ws))
    last = frozenset(w for ws in _LAST_POINTERS.values() for w in words(ws))
    return openers, persons, last, stopwords(("de",))


def is_follow_up(utterance: str) -> bool:
    """True when ``utterance`` leans on the turn before it (see the module docstring).

    >>> [is_follow_up(t) for t in ("And tomorrow?", "Where does she live?", "When was that?")]
    [True, True, True]
    >>> [is_follow_up(t) for t in ("What's my name?", "What did Melanie paint?", "What did I do that weekend?")]
    [False, False, False]
    >>> [is_follow_up(t) for t in ("What time is it?", "Is there any milk?", "É possível?", "Können Sie helfen?")]
    [False, False, False, False]
    >>> [is_follow_up(t) for t in ("Wie ist Ihr Name?", "Kann das sein?", "What song is this?")]
    [False, False, False]
    >>> [is_follow_up(t) for t in ("When was it?", "What did I do there?", "Tell me more about that.")]
    [True, True, True]
    >>> [is_follow_up(t) for t in ("E-mail my boss", "Also, when is it?", "Und morgen?", "Wann hat er Geburtstag?")]
    [False, True, True, True]
    >>> [is_follow_up(t) for t in ("What does Jon tell Gina he won't do?", "what does she do", "Is she OK?")]
    [False, True, True]
    """
    matches = list(WORD.finditer(utterance[:400]))
    if not matches:
        return False
    raw = [m.group() for m in matches]
    words = [normalise_term(w) for w in raw]
    openers, persons, last, german = _lists()
    if _opens_with_follow_up(utterance, matches, openers):
        return True
    stop = _STOP.for_text(utterance)
    # A name after the first word says whom the pronouns are about: "What does Jon tell Gina he
    # won't do?" leans on nothing. German capitalises every noun, and a lower-case transcript
    # none: there the words are counted alone.
    reads_german = stop == german  # the list of the language the turn reads as
    if not reads_german and any(w[0].isupper() and t not in stop for w, t in zip(raw[1:], words[1:])):
        return False
    named = {w for w in words if w not in stop and w not in persons and w not in last}
    if len(named) > MAX_NAMED:
        return False
    # German "Sie", "Ihr", "Ihnen"... capitalised inside a sentence are the polite "you".
    if any(t in persons and not (i and w in _POLITE) for i, (w, t) in enumerate(zip(raw, words))):
        return True
    # "What time is it?", "what day was it": "it" after "is" names nothing when the turn names
    # what it asks; "when was it?" names nothing else, and leans on the turn before.
    impersonal = words[-2:] in (["is", "it"], ["was", "it"], ["s", "it"]) and bool(named)
    return words[-1] in last and not impersonal


def _opens_with_follow_up(utterance: str, matches: list[re.Match[str]],
                          openers: frozenset[tuple[str, ...]]) -> bool:
    # A word joined to the next is not one ("e-mail", "y'all"), nor French "y a-t-il".
    first_end = matches[0].end()
    if utterance[first_end:first_end + 1] in ("-", "'", "\u2019"):
        return False
    lower = [m.group().lower() for m in matches[:4]]
    if lower[:2] == ["y", "a"]:
        return False
    return any(tuple(lower[:len(o)]) == o for o in openers)
