"""Which stored facts a turn sends: the few that say who the user is, always; the rest on merit.

Sending every fact on every turn spends the shared ``max_added_tokens`` budget before recall
gets any: with a few dozen facts, the recalled exchange that answers the question no longer
fits. So a turn gets

* the *core* facts (the user's name and home city), whatever was asked: a persona needs them
  to address the user at all;
* then the facts sharing a content word with the utterance, most shared words first (ties: the
  newer fact first), at most ``limit`` of them. A fact also shares the words that ask for its
  kind: "User works as a nurse" answers "what's my job?" and "what do I do for a living?",
  "User's dog is called Rex" answers "do I have pets?".

    >>> facts = ["User's name is Ana", "User likes jazz", "User's pet: cat called Miso", "User works as a nurse"]
    >>> choose_facts(facts, "what music do I like? jazz?", limit=3)
    ["User's name is Ana", 'User likes jazz']
    >>> choose_facts(facts, "What do I do for a living?", limit=3)
    ["User's name is Ana", 'User works as a nurse']
"""
from __future__ import annotations

import functools
from collections.abc import Sequence

from ..._index.stopwords import StopWords, content_words
from .kinds import read_statement, singular, statement, wordset
from .rules import make_fact

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


# The words a question about a kind of fact uses, though the fact may hold none of them (English
# and the four other languages the rules read; singular, as _words makes them).
_ASKED_BY = {kind: frozenset(map(singular, words.split())) for kind, words in {
    "job": "job jobs work working living occupation profession career trabalho emprego profissão trabajo empleo "
           "profesión oficio beruf arbeit travail métier",
    "workplace": "work working job employer company office workplace trabalho empresa trabajo arbeit firma travail",
    "home_city": "live living city town home cidade casa ciudad stadt wohnort ville",
    "age": "age old idade edad alter alt âge",
    "birthday": "birthday born birth aniversário cumpleaños geburtstag anniversaire",
    "partner": "partner wife husband girlfriend boyfriend spouse married esposa marido namorada namorado parceiro "
               "parceira casado casada esposo novia novio pareja ehefrau ehemann partnerin verheiratet femme mari "
               "copine copain conjoint marié mariée",
    "friend": "friend friends amigo amiga freund freundin ami amie",
    "family": "family mother mom mum father dad parent sister brother sibling son sons daughter kid kids child "
              "children família familia familie famille",
    "pet": "pet pets animal animais animales haustier tier animaux",
    "food": "food eat eating diet meal dish cook cooking comida comer dieta prato cozinhar plato cocinar essen "
            "gericht kochen ernährung nourriture manger repas plat cuisine cuisiner",
    "allergy": "allergy allergies allergic eat food alergia alergias alérgico alérgica allergie allergien "
               "allergisch allergique",
    "music": "music song band listen música canção banda ouvir canción escuchar musik hören musique chanson "
             "groupe écouter",
    "hobby": "hobby hobbies pastime passatempo passatempos pasatiempo afición freizeit loisir loisirs",
    "trip": "trip travel travelling traveling holiday vacation viagem viajar férias viaje vacaciones reise reisen "
            "urlaub voyage voyager vacances",
    "language": "language speak língua idioma falar hablar lengua sprache sprechen langue parler",
    "health": "health medical medication condition saúde medicação salud medicamento gesundheit medikament "
              "santé médicament",
    "pref": "like love favourite favorite prefer enjoy gosto gosta gostas favorito favorita preferido preferida "
            "gusta gustan encanta mag magst aime adore préféré préférée",
}.items()}
# Who a fact about someone in the user's life names ("sister.name"): the kind they belong to.
_PERSON_KIND = {**dict.fromkeys(wordset("cat dog puppy kitten hamster parrot rabbit fish horse bird"), "pet"),
                **dict.fromkeys(wordset("wife husband girlfriend boyfriend partner spouse"), "partner"),
                **dict.fromkeys(wordset("mother mom mum father dad sister brother son daughter kid child parent "
                                        "grandmother grandfather aunt uncle cousin"), "family")}


@functools.lru_cache(maxsize=4096)
def _asked_by(fact: str) -> frozenset[str]:
    """The words a question about ``fact``'s kind uses (its text read once: facts repeat every turn)."""
    kind = make_fact(fact).kind
    who, _, attribute = kind.partition(".")
    return (_ASKED_BY.get(kind, frozenset()) | _ASKED_BY.get(_PERSON_KIND.get(who, ""), frozenset())
            | _ASKED_BY.get(attribute, frozenset()) | ({singular(who)} if attribute else frozenset()))


def choose_facts(facts: Sequence[str], utterance: str, limit: int) -> list[str]:
    """The core facts, then up to ``limit`` others sharing a content word with ``utterance``
    (most shared first, the newer first on a tie), in the order they are stored."""
    # The utterance's language says which words are function words, in the facts too ("son").
    ignore = StopWords().for_text(utterance) | _FACT_WORDS
    asked = _words(utterance, ignore)
    core = {i for i, fact in enumerate(facts) if is_core_fact(fact)}
    shared = {i: len(asked & (_words(fact, ignore) | _asked_by(fact))) for i, fact in enumerate(facts) if i not in core}
    ranked = sorted((i for i, n in shared.items() if n > 0), key=lambda i: (-shared[i], -i))
    chosen = core | set(ranked[:limit])
    return [fact for i, fact in enumerate(facts) if i in chosen]
