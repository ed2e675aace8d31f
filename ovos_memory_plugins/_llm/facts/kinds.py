"""What a fact is about: its attribute, the words of its value, and the sentence stored for it.

Every fact, from the model or from the offline rules, is an *attribute* ("home_city", "music",
"pref"...), a *subject* (the value's words, normalised: "porto") and a polarity. That is what
makes a change supersede the old fact whatever said it:

* a **single-valued** attribute (name, home city, job, workplace, age, birthday, and what the
  rules read as "my X is Y") has one value: a new one replaces the old;
* a **multi-valued** one (friends, pets, music, hobbies, trips, preferences...) holds several:
  a new fact replaces an old one of the same attribute whose words it contains or that contain
  its words ("Japan in October" then "Japan, October 3rd" - a restatement with detail), and a
  negation replaces the matching positive fact of any such attribute ("I don't like jazz
  anymore" withdraws "User's music: jazz" as well as the rules' "User loves jazz").

The sentence is built by code, never by the model ("User lives in Porto", "User's pet: cat
called Bolacha", "User no longer likes jazz"), and :func:`read_statement` reads it back, so a
store holding only the sentences (a summary's text, a file written by the reference) still
yields what each fact is about.

    >>> statement("home_city", "Porto")
    'User lives in Porto'
    >>> statement("music", "jazz", negated=True)
    "User's music: not jazz"
    >>> read_statement("User's upcoming trip: Japan in October")
    ('trip', 'Japan in October', False)
"""
from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["ATTRIBUTES", "MULTI_VALUED", "SINGLE_VALUED", "STOP_WORDS", "about", "is_single_valued", "label",
           "person_attribute", "plain", "read_statement", "singular", "statement", "stem", "subject_of", "wordset"]

def wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Glue words: never what a value is about.
STOP_WORDS = wordset("""
a an the it this that these those them him her you me us something anything everything nothing there here to
of in on at for with and or but so very really too much many lot lots bit some any my your our his their its o
os as um uma de do da dos das em no na el la los las un una lo le les der die das ein eine den dem es ça is
are was be been am i we they he she not no yes
""")

#: The attributes a model may name (the extraction schema's enum), with their labels.
ATTRIBUTES: dict[str, str] = {
    "name": "name", "home_city": "home city", "job": "job", "workplace": "workplace", "age": "age",
    "birthday": "birthday", "partner": "partner", "friend": "friend", "family": "family", "pet": "pet",
    "food": "food", "music": "music", "hobby": "hobby", "trip": "upcoming trip", "language": "language",
    "health": "health", "other": "other",
}
SINGLE_VALUED = frozenset({"name", "home_city", "job", "workplace", "age", "birthday", "from"})
#: Multi-valued attributes, the model's and the rules' ("pref": likes and dislikes, "is": "User is a teacher").
MULTI_VALUED = frozenset(set(ATTRIBUTES) - SINGLE_VALUED) | {"pref", "is", "allergy"}

# Natural sentences for the attributes the offline rules also state (the rules' own wording).
_SENTENCES: dict[str, tuple[str, str | None]] = {
    "name": ("User's name is {v}", None),
    "home_city": ("User lives in {v}", "User no longer lives in {v}"),
    "job": ("User works as {a}{v}", "User no longer works as {a}{v}"),
    "workplace": ("User works at {v}", "User no longer works at {v}"),
    "age": ("User is {v} years old", None),
    "birthday": ("User's birthday is {v}", None),
    "pref": ("User likes {v}", "User no longer likes {v}"),
    "is": ("User is {a}{v}", "User is no longer {a}{v}"),
}
_LABELS = {text: attribute for attribute, text in ATTRIBUTES.items()}
_LABELLED = re.compile(r"^(?:the\s+)?user's\s+(?P<label>[a-z][a-z ]{1,20}?)\s*:\s*(?P<neg>not\s+|no longer\s+)?"
                       r"(?P<v>\S.*?)\.?$", re.IGNORECASE)
_NEGATED = [
    (re.compile(r"^(?:the\s+)?user no longer lives in\s+(?P<v>\S.*?)\.?$", re.I), "home_city"),
    (re.compile(r"^(?:the\s+)?user no longer works at\s+(?P<v>\S.*?)\.?$", re.I), "workplace"),
    (re.compile(r"^(?:the\s+)?user no longer works as\s+(?:an?\s+)?(?P<v>\S.*?)\.?$", re.I), "job"),
    (re.compile(r"^(?:the\s+)?user no longer likes\s+(?P<v>\S.*?)\.?$", re.I), "pref"),
    (re.compile(r"^(?:the\s+)?user is no longer\s+(?:an?\s+)?(?P<v>\S.*?)\.?$", re.I), "is"),
]
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_ARTICLES = frozenset(("a", "an", "the", "o", "os", "as", "um", "uma", "el", "la", "los", "las", "un", "une", "le",
                       "les", "der", "die", "das", "ein", "eine"))


def is_single_valued(attribute: str) -> bool:
    """One value at a time: the named attributes, and what the rules read as "my X is Y" or "my X is called Y".

    Someone else's attribute ("sister_ana.home_city") has the kind of its last part.
    """
    if attribute.startswith("text:"):
        return False
    base = attribute.rsplit(".", 1)[-1]
    return base in SINGLE_VALUED or base not in MULTI_VALUED


def person_attribute(person: str, attribute: str) -> str:
    """The attribute of someone in the user's life: ``("sister Ana", "health")`` -> ``"sister_ana.health"``;
    their facts supersede each other as the user's do, never the user's."""
    return "_".join(plain(w) for w in _WORD.findall(person)) + "." + attribute


def about(person: str, sentence: str) -> str:
    """A sentence :func:`statement` wrote about the user, said of ``person`` instead:
    "User lives in Porto" -> "User's sister Ana lives in Porto"."""
    if sentence.startswith("User's "):
        return f"User's {person}'s {sentence[len('User' + chr(39) + 's '):]}"
    return f"User's {person}{sentence[len('User'):]}" if sentence.startswith("User") else sentence


def label(attribute: str) -> str:
    return ATTRIBUTES.get(attribute, attribute.replace("_", " "))


def _article(value: str) -> str:
    first = value.split()[0].casefold() if value.split() else ""
    if first in _ARTICLES or not value[:1].isalpha() or value[:1].isupper():
        return ""
    return "an " if value[:1].casefold() in "aeiou" else "a "


def statement(attribute: str, value: str, negated: bool = False) -> str:
    """The sentence stored for a fact (third person, built by code)."""
    positive, negative = _SENTENCES.get(attribute, (None, None))
    template = negative if negated else positive
    if template is None:
        return f"User's {label(attribute)}: {'not ' if negated else ''}{value}"
    return template.format(v=value, a=_article(value))


def read_statement(text: str) -> tuple[str, str, bool] | None:
    """``(attribute, value, negated)`` of a sentence :func:`statement` wrote, else None."""
    text = " ".join((text or "").split())
    for pattern, attribute in _NEGATED:
        found = pattern.match(text)
        if found:
            return attribute, found.group("v"), True
    found = _LABELLED.match(text)
    if found and found.group("label").casefold() in _LABELS:
        return _LABELS[found.group("label").casefold()], found.group("v"), bool(found.group("neg"))
    return None


def plain(word: str) -> str:
    """``word`` case-folded, accents removed ("São" -> "sao")."""
    word = unicodedata.normalize("NFD", word.replace("\u2019", "'").casefold())
    return "".join(c for c in word if unicodedata.category(c) != "Mn")


def singular(word: str) -> str:
    """``word`` plain, plural s dropped: "Hospitals" and "hospital" compare equal."""
    word = plain(word)
    return word[:-1] if len(word) > 4 and word.endswith("s") else word


def stem(word: str) -> str:
    """A six-letter stem of :func:`singular`: loose enough to tell whether the user said a word
    ("bouldering" for "boulder"), too loose to tell two values apart ("Portugal", "Portuguese")."""
    return singular(word)[:6]


@functools.lru_cache(maxsize=8192)  # compared against every stored fact at every merge
def subject_of(value: str) -> frozenset[str]:
    """The value's content words, comparable ("Cats" and "cat"), whole: values that share a
    beginning stay apart ("Lisboa" and "lisbon", "item0001" and "item0002")."""
    return frozenset(singular(w) for w in _WORD.findall(value) if w.casefold() not in STOP_WORDS)
