"""Facts about the user from clear first-person statements, without any model.

:func:`extract_facts` reads statements such as "my name is Ana", "I live in Lisbon", "I like
jazz" or "my dog is called Rex", in English, Portuguese, Spanish, German and French; ``entity``
uses it when no model answers. :func:`make_fact` gives any fact string its *key* (subject +
attribute, e.g. ``name``, ``lives_in``, ``dog.name``, ``pref:jazz``): two facts with one key
contradict each other, and the newer supersedes the older ("my name is Ana", then "call me Bea").

    >>> [f.text for f in extract_facts("Hi! My name is Ana and I live in Lisbon.")]
    ["User's name is Ana", 'User lives in Lisbon']
    >>> make_fact("The user's name is Bea").key
    'name'
"""
from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from ..._core.untrusted import steers
from .kinds import STOP_WORDS, is_single_valued, read_statement, statement, wordset
from .secrets import holds_secret, secrets_given

__all__ = ["MAX_FACT_CHARS", "SUPPOSING", "UNDOING", "WORD", "Fact", "extract_facts", "make_fact", "model_fact",
           "normalise"]

#: Only the start of a very long user turn is read by the rules.
MAX_RULE_CHARS = 8_000
#: Facts longer than this are not short durable facts (and would bloat every prompt).
MAX_FACT_CHARS = 200


@dataclass(frozen=True)
class Fact:
    """A fact line and what it is about.

    Attributes:
        text: the line injected under the facts header ("User's name is Ana").
        key: subject + attribute as the rules read it ("name", "lives_in", "pref:jazz"). Facts
            that no rule understands get ``"text:<normalised text>"`` (dedup only, never superseded).
        value: the normalised value ("ana"), used to tell a repeat from a change.
        attribute: what the fact is about in the vocabulary shared with the model
            (:mod:`~ovos_memory_plugins._llm.facts.kinds`): "home_city" for the rules' "lives_in".
        subject: the words the attribute's value is made of, normalised ("jazz" for "User loves jazz").
        negated: the user does not, or no longer, like, do or have it.
        said: the value as the sentence shows it ("Santa Maria hospital").
    """

    text: str
    key: str
    value: str = ""
    attribute: str = ""
    subject: str = ""
    negated: bool = False
    said: str = ""

    @property
    def kind(self) -> str:
        """The attribute, or the key for a fact without one."""
        return self.attribute or self.key



# The value ends at punctuation, a spaced dash or a conjunction (en, pt, es, de, fr).
# A title's period ("Dr. Almeida", "St. Louis") is part of the value, not its end.
_OPENERS = "my|i|i'm|we|he|she|they|it|the|and|but|our|your|his|her|this|that|there"
#: Titles and abbreviations whose period goes on with a name ("Dr. Almeida", "St. Louis").
_TITLES = ("dr", "dra", "mr", "mrs", "ms", "mme", "prof", "profa", "sr", "sra", "srta", "st", "mt")
_TITLE_DOT = r"(?:" + "|".join(rf"(?<=\b{t})" for t in _TITLES) + rf")\.(?=\s+(?!(?:{_OPENERS})\b)[^\W\d_])"
_END = (r"(?=\s*(?!" + _TITLE_DOT + r")[,.;:!?()\n]|\s+[-\u2013\u2014]\s|\s+(?:and|but|so|because|though|although|"
        r"while|since|who|which|e|mas|porque|y|pero|und|aber|weil|denn|et|mais|car|parce)\b|\s*$)")
# At most ~80 characters: a value is a few words, and the bound keeps matching linear on
# hostile input ("I like " repeated for pages).
_V = r"(?P<v>[^\s,.;:!?()](?:[^,.;:!?()\n]|" + _TITLE_DOT + r"){0,80}?)" + _END
_X = r"(?P<x>[^\W\d_]+(?:\s[^\W\d_]+)?)"
# A name said as "I'm Marta": one capitalised word (case-sensitive inside the case-blind rules),
# then the end of the clause.
_NAME = r"(?P<v>(?-i:[A-Z\u00c0-\u00de][\w'-]+))(?=\s*(?:[,.!;]|$)|\s+(?:by the way|btw|and|here)\b)"
_WORKPLACE = (r"(?P<v>[^,.;:!?()\n]{0,40}?\b(?:hospital|clinic|school|university|college|office|company|bank|"
              r"factory|lab|laboratory|agency|firm|caf[eé]|restaurant|hotel|shop|store|library|museum))\b")
_DIETS = r"(?P<v>vegetarian|vegan|pescatarian|vegetarian[oa]|vegan[oa]|vegetariana|vegana)\b"

# (pattern, key, text): key and text may use {v} (value) and {x} (attribute word(s)).
_RULES: list[tuple[str, str, str]] = [
    # names
    (r"\bmy name(?:'s|\s+is)\s+" + _V, "name", "User's name is {v}"),
    (r"\b(?:call me|i'm called|i am called|i'm named|i am named|people call me)\s+" + _V, "name",
     "User's name is {v}"),
    (r"\b(?:o\s+)?meu nome (?:é|e)\s+" + _V, "name", "User's name is {v}"),
    (r"\b(?:me chamo|chamo-me)\s+" + _V, "name", "User's name is {v}"),
    (r"\b(?:mi nombre es|me llamo)\s+" + _V, "name", "User's name is {v}"),
    (r"\b(?:mein name ist|ich hei(?:ß|ss)e)\s+" + _V, "name", "User's name is {v}"),
    (r"\b(?:je m'appelle|mon nom est)\s+" + _V, "name", "User's name is {v}"),
    (r"^(?:(?:hi|hello|hey|oh|and)\b[\s,!]*(?:there\b[\s,!]*)?)?(?:i'm|i am)\s+" + _NAME, "name",
     "User's name is {v}"),
    # diets, before "I'm a ..." reads them as an identity
    (r"\b(?:i'm|i am|i've been|i have been)\s+(?:now\s+|a\s+|an\s+|strictly\s+|fully\s+)*" + _DIETS, "food:{v}",
     "User is {v}"),
    (r"\b(?:eu\s+)?sou\s+" + _DIETS, "food:{v}", "User is {v}"),
    # named things: "my dog is called Rex", "my dog's name is Rex", "I have a cat named Tom"
    (r"\bmy\s+" + _X + r"(?:'s name is|\s+is\s+(?:called|named))\s+" + _V, "{x}.name", "User's {x} is called {v}"),
    (r"\bi (?:have|own|got) (?:a|an|two|three)\s+" + _X + r"\s+(?:called|named)\s+" + _V, "{x}.name",
     "User's {x} is called {v}"),
    (r"\bmy favou?rite\s+" + _X + r"\s+is\s+" + _V, "favorite.{x}", "User's favorite {x} is {v}"),
    # places
    (r"\bi(?:\s+currently)?\s+(?:live|reside)\s+in\s+" + _V, "lives_in", "User lives in {v}"),
    (r"\bi(?:'ve|\s+have)?\s+(?:just\s+|recently\s+)?moved from\s+[^,.;:!?()\n]{1,60}?\s+to\s+" + _V, "lives_in",
     "User lives in {v}"),
    (r"\bi(?:'ve|\s+have)?\s+(?:just\s+|recently\s+)?moved to\s+" + _V, "lives_in", "User lives in {v}"),
    (r"\b(?:i'm|i am|i come) from\s+" + _V, "from", "User is from {v}"),
    (r"\b(?:eu\s+)?(?:agora\s+)?(?:moro|vivo)(?:\s+agora)? (?:em|no|na|nos|nas)\s+" + _V, "lives_in",
     "User lives in {v}"),
    (r"\b(?:yo\s+)?(?:ahora\s+)?vivo(?:\s+ahora)? en\s+" + _V, "lives_in", "User lives in {v}"),
    (r"\b(?:ich\s+)?(?:wohne|lebe)(?:\s+(?:jetzt|nun|inzwischen|seit kurzem))? in\s+" + _V, "lives_in",
     "User lives in {v}"),
    (r"\b(?:j'habite|je vis)(?:\s+(?:maintenant|désormais|depuis peu))? (?:à|a|en|au|aux)\s+" + _V, "lives_in",
     "User lives in {v}"),
    # moves, in the other languages: "mudei-me para o Porto", "me mudé a Madrid", "ich bin nach
    # Berlin gezogen", "j'ai déménagé à Lyon"
    (r"\b(?:eu\s+)?(?:me\s+)?mudei(?:-me)?\s+(?:agora\s+)?(?:para|pra)\s+(?:o\s+|a\s+)?" + _V, "lives_in",
     "User lives in {v}"),
    (r"\b(?:me\s+(?:he\s+)?mud(?:[ée]|ado)|mud[ée]me)\s+(?:ahora\s+)?a\s+" + _V, "lives_in", "User lives in {v}"),
    (r"\bich\s+bin\s+(?:jetzt\s+|gerade\s+|vor kurzem\s+|letzte woche\s+)?nach\s+"
     r"(?P<v>[^\W\d_][^,.;:!?()\n]{0,60}?)\s+(?:um)?gezogen\b", "lives_in", "User lives in {v}"),
    (r"\b(?:j'ai\s+d[ée]m[ée]nag[ée]|je\s+me\s+suis\s+install[ée]e?)\s+(?:à|a|en|au|aux)\s+" + _V, "lives_in",
     "User lives in {v}"),
    # work and identity
    (r"\bi work as\s+" + _V, "job", "User works as {v}"),  # the article stays: "as a nurse"
    (r"\bi(?:\s+now|\s+still)?\s+work (?:at|for|in)\s+" + _WORKPLACE, "employer", "User works at {v}"),
    (r"\bi(?:\s+now|\s+still)?\s+work (?:at|for)\s+" + _V, "employer", "User works at {v}"),
    (r"\b(?:i'm|i am)\s+(?:now\s+|still\s+)?working\s+at\s+" + _WORKPLACE, "employer", "User works at {v}"),
    # "I'm at Santa Maria hospital" says where one works; "I'm at the hospital visiting my mum" does not.
    (r"\b(?:i'm|i am)\s+(?:now\s+|still\s+)?at\s+(?!(?:the|a|an|my|our|his|her|their)\s)" + _WORKPLACE, "employer",
     "User works at {v}"),
    (r"\b(?:eu\s+)?trabalho como\s+" + _V, "job", "User works as {v}"),
    (r"\btrabajo como\s+" + _V, "job", "User works as {v}"),
    (r"\bich arbeite als\s+" + _V, "job", "User works as {v}"),
    (r"\bje travaille comme\s+" + _V, "job", "User works as {v}"),
    (r"\b(?:i'm|i am)\s+(?P<v>\d{1,3})(?:\s+years?\s+old|\s*$|(?=\s*[,.!;]))", "age", "User is {v} years old"),
    (r"\bmy birthday is\s+" + _V, "birthday", "User's birthday is {v}"),
    (r"\b(?:i'm|i am) allergic to\s+" + _V, "allergy:{v}", "User is allergic to {v}"),
    (r"\b(?:i'm|i am) (?:a|an)\s+" + _V, "is:{v}", "User is a {v}"),
    # preferences: one key per object, so "I hate jazz" supersedes "I love jazz"
    (r"\bi (?:don't|do not|dont) (?:really\s+)?(?:like|enjoy|love)\s+" + _V, "pref:{v}", "User does not like {v}"),
    (r"\bi (?:really\s+)?(?:like|enjoy)\s+" + _V, "pref:{v}", "User likes {v}"),
    (r"\bi (?:really\s+)?(?:love|adore)\s+" + _V, "pref:{v}", "User loves {v}"),
    (r"\bi (?:really\s+)?(?:hate|dislike|can't stand|cannot stand)\s+" + _V, "pref:{v}", "User dislikes {v}"),
    (r"\bi prefer\s+" + _V, "pref:{v}", "User prefers {v}"),
    (r"\b(?:i'm|i am)\s+(?:really\s+|now\s+|totally\s+)?into\s+" + _V, "pref:{v}", "User likes {v}"),
    (r"\b(?:eu\s+)?gosto (?:muito )?(?:de|do|da|dos|das)\s+" + _V, "pref:{v}", "User likes {v}"),
    (r"\b(?:eu\s+)?(?:adoro|amo)\s+" + _V, "pref:{v}", "User loves {v}"),
    (r"\b(?:eu\s+)?odeio\s+" + _V, "pref:{v}", "User dislikes {v}"),
    (r"\bme gustan?\s+(?:mucho\s+)?" + _V, "pref:{v}", "User likes {v}"),
    (r"\bme encantan?\s+" + _V, "pref:{v}", "User loves {v}"),
    (r"\b(?:yo\s+)?odio\s+" + _V, "pref:{v}", "User dislikes {v}"),
    (r"\bich mag\s+" + _V, "pref:{v}", "User likes {v}"),
    (r"\bich liebe\s+" + _V, "pref:{v}", "User loves {v}"),
    (r"\bich hasse\s+" + _V, "pref:{v}", "User dislikes {v}"),
    (r"\bj'aime (?:bien\s+)?" + _V, "pref:{v}", "User likes {v}"),
    (r"\bj'adore\s+" + _V, "pref:{v}", "User loves {v}"),
    (r"\bje d[ée]teste\s+" + _V, "pref:{v}", "User dislikes {v}"),
    # anything else shaped "my X is Y" (last: the specific rules above win)
    (r"\bmy\s+" + _X + r"\s+is\s+(?!called\b|named\b|not\b|that\b|so\b|very\b|too\b)" + _V, "{x}", "User's {x} is {v}"),
]
_COMPILED = [(re.compile(p, re.IGNORECASE), key, text) for p, key, text in _RULES]

# "my point is", "my pleasure": not facts about the user.
_GENERIC_X_BLOCKLIST = wordset("""
point question guess problem pleasure turn bad fault opinion answer concern worry issue goodness god gosh
request bet mistake apologies apology name favorite favourite birthday guess thought idea
""")
_NAME_BLOCKLIST = wordset("""
later back again tomorrow soon sometime anytime when if now maybe please fine good okay ok sorry here home ready
done tired hungry busy sure glad happy great well alright english french dutch swiss thai greek american canadian
brazilian italian german indian mexican irish scottish welsh russian ukrainian australian african european asian
christian muslim jewish catholic vegan vegetarian not so just still also too very
starving famished jealous exhausted bored sick ill cold hot late early lost confused excited nervous worried scared
afraid sad angry upset lonely stuck free single married pregnant retired stressed depressed sleepy thirsty full broke
awake alone curious serious honest proud grateful thankful impressed amazed shocked freezing dying leaving going
coming kidding joking working waiting trying thinking listening driving cooking off out in on
""")
# Not a home: "I live in a small flat" (a home, not where), "I live in hope", "in the moment".
_NOT_A_PLACE = wordset("""
hope fear denial peace moment past present future harmony luxury poverty sin style comfort shame fantasy dream
dreams reality misery constant terror dread
""")
# Where a move in another language goes that is no town ("mudei-me para *uma* casa maior", "para
# *lá*", "me mudé a *los* 18 años", "nach *Hause*"), in lower case as the sentence says them.
_NOT_A_TOWN = wordset("""
um uma un una une ein eine einen lá la allí alli allá alla ahí ahi dort dorthin là hause Hause dem den los las el
""")
# A statement denied or undone in the words before it, in the other languages ("*Não* me mudei
# para o Porto", "*Quase* me mudei", "*No* me mudé a Madrid"); English says it inside the rule.
#: Words that deny or undo what follows them in the other languages the rules read.
UNDOING = r"não|nao|no|nunca|quase|casi|jam[áa]s|nicht|nie|fast|pas|jamais|presque"
_UNDONE_BEFORE = re.compile(rf"(?i)\b(?:{UNDOING})\s+(?:me\s+|eu\s+|yo\s+)?$")
# Not an employer: "I work at night", "I work at home", "I work at weekends".
_NOT_AN_EMPLOYER = wordset("""
night nights home weekends weekend night-shift times least all day days morning mornings evening evenings noon
""")
# Nationalities and languages the list above does not hold ("Portuguese", "Polish", "Danish").
_NOT_A_NAME = re.compile(r"(?:ese|ish)$", re.IGNORECASE)
_TRAILING = wordset("""
actually really too also though anyway anyways now lol haha much indeed anymore nowadays very
""")
# The same in the other languages, in lower case only: "Café Agora" is a name.
_TRAILING_ELSEWHERE = frozenset(("agora", "ahora", "jetzt", "maintenant", "finalmente", "entonces"))
# Trailing phrases of more than one word, same purpose: "I don't like jazz any more", "I like
# jazz very much".
# So are times said after a move or a change: "I moved to Porto last week".
_TRAILING_PHRASE = re.compile(r"(?:\s+(?:any more|these days|at all|no more|last (?:week|month|year|weekend)|al final|"
                              r"(?:(?:very|so|really|quite),?\s+)*much(?:\s+indeed)?|a lot|a great deal|"
                              r"(?:hace|há|ha) \w+ (?:años|anos|meses|semanas|d[ií]as)|(?:el|o|no) a[ñn]o pasado|"
                              r"l'ann[ée]e derni[èe]re|l'an dernier|letztes jahr|vor \w+ (?:jahren|monaten|wochen)|"
                              r"this (?:week|month|year)|(?:a few|two|three) (?:days|weeks|months) ago|yesterday|"
                              r"today|recently))+$", re.IGNORECASE)
_DEGREE_WORDS = wordset("""
bit little lot kind sort tad huge
""")
# A value opening like a clause ("I love how it shows...", "what I love is awesome") or with a
# pronoun ("I like it after a day out") says nothing durable on its own. English only: the
# other languages' rules are narrower.
_CLAUSE_OPENERS = wordset("""
is are was were am be been has have had will would can could should does did it that this these those
them him her you how what when where why whether if
""")
# A value cut off after one of these ("I'm a part of", "I love camping with the") is a fragment.
# Not "on", "in", "to": they end phrasal verbs ("something I keep working on").
_DANGLING = wordset("""
of the a an and or my your their our his her
""")
_ARTICLES = re.compile(r"^(?:the|a|an|o|os|as|um|uma|el|la|los|las|un|une|le|les|l'|der|die|das|ein|eine)\s+",
                       re.IGNORECASE)
WORD = re.compile(r"[^\W_]+", re.UNICODE)
# The fact speaks of the user in the third person, so a first-person word left in the value
# ("my sister is coming with me") must not read as the assistant speaking.
_FIRST_PERSON = {"me": "them", "my": "their", "mine": "theirs", "myself": "themselves", "i": "they",
                 "i'm": "they're", "i've": "they've", "i'd": "they'd", "i'll": "they'll", "i am": "they are"}
# Longest first, so "i am" and "i'm" are read before "i".
_FIRST_PERSON_WORD = re.compile(r"\b(?:" + "|".join(sorted(_FIRST_PERSON, key=len, reverse=True)) + r")\b",
                                re.IGNORECASE)
# Only statements made by an English rule are rewritten: "me" is also Spanish, French and
# Portuguese ("cuando me llaman").
_ENGLISH_RULE = re.compile(r"(?:my|i|i'm|i've|call me|people call me)\b", re.IGNORECASE)
#: A sentence that supposes rather than states ("If I moved to Porto", "Quando me mudei para Lisboa, ...").
SUPPOSING = re.compile(r"(?i)\W*(?:if|when|what if|suppose|se|si|wenn|als|quando|cuando|quand)\b")
_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\n+")
#: A period that ends a title or an initial, not a sentence ("Dr. Almeida", "St. Louis", "J. Smith").
_ABBREVIATION_END = re.compile(rf"(?:^|[\s(])(?:{'|'.join(_TITLES)}|[a-z])\.$", re.IGNORECASE)
#: A sentence's first word, which a title never comes before ("a Dr. My dog is Rex." is two sentences).
_OPENER = re.compile(rf"(?:{_OPENERS})\b", re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    """The sentences of ``text``; a piece ending in a title or an initial joins the next one when
    that goes on with a name (a word, not a sentence's usual first word)."""
    out: list[str] = []
    for piece in _SENTENCES.split(text):
        if out and _ABBREVIATION_END.search(out[-1]) and piece[:1].isalpha() and not _OPENER.match(piece):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out
_MAX_VALUE_WORDS = 6


def normalise(text: str) -> str:
    """Lower case, apostrophes unified, accents kept (they distinguish words)."""
    text = unicodedata.normalize("NFC", text).replace("\u2019", "'").replace("\u2018", "'")
    return " ".join(text.split())


def _norm_value(value: str) -> str:
    value = _ARTICLES.sub("", value.strip().casefold())
    return " ".join(WORD.findall(value))


def _clean_value(raw: str, key: str) -> str | None:
    raw = _TRAILING_PHRASE.sub("", raw.strip())
    words = raw.strip().strip("\"'`").split()
    while words and (words[-1].casefold() in _TRAILING or words[-1] in _TRAILING_ELSEWHERE):
        words.pop()  # "I hate jazz actually"
    value = " ".join(words)
    if not words or len(words) > _MAX_VALUE_WORDS:
        return None
    if not (value[:1].isalnum() or value[:1] in "£$€¥" or value[:2] in {f"#{d}" for d in "0123456789"}):
        return None  # markup, not a value: "### Instructions", "<b>", "- item" ("#7" and "$500" are values)
    content = [w for w in WORD.findall(value.casefold()) if w not in STOP_WORDS]
    if not content:
        return None  # "I like it", "I love you": nothing durable
    if key == "name" and (len(words) > 3 or _NOT_A_NAME.search(words[0])
                          or any(part in _NAME_BLOCKLIST for part in words[0].casefold().split("-"))):
        return None  # "call me later", "I'm Portuguese"
    if key.startswith("is:") and words[0].casefold() in _DEGREE_WORDS:
        return None  # "I'm a bit tired"
    if key == "lives_in" and (words[0].casefold() in ("a", "an") or words[0] in _NOT_A_TOWN
                              or content[0] in _NOT_A_PLACE or value[:1].isdigit()):
        return None  # "I live in a small flat with two cats" does not move the user out of Porto
    if key == "employer" and content[0] in _NOT_AN_EMPLOYER:
        return None  # "I work at night this week"
    if key != "name" and words[0].casefold() in _CLAUSE_OPENERS:
        return None  # "I love how it looks"
    if words[-1].casefold() in _DANGLING:
        return None  # "I'm a part of"
    return value


def _attribute(x: str) -> str:
    """The attribute as said, its first word in lower case: "Dog" -> "dog", "sister Lena" stays."""
    first, _, rest = x.partition(" ")
    return f"{first.lower()} {rest}" if rest else first.lower()


def _third_person(value: str) -> str:
    return _FIRST_PERSON_WORD.sub(lambda m: _FIRST_PERSON[m.group(0).lower()], value)


# The rules' keys in the vocabulary shared with the model (kinds.py): "lives_in" is "home_city".
_ATTRIBUTE_OF_KEY = {"lives_in": "home_city", "employer": "workplace"}
_NEGATIVE = frozenset({"User does not like {v}", "User dislikes {v}"})


def _attribute_of(key: str) -> str:
    """The shared attribute of a rule key ("pref:jazz" -> "pref", "lives_in" -> "home_city")."""
    head, sep, _ = key.partition(":")
    if sep and head in ("pref", "is", "allergy", "food"):
        return head
    return _ATTRIBUTE_OF_KEY.get(key, key)


def _matches(sentence: str) -> list[Fact]:
    """The facts stated in ``sentence``, in the order they are said."""
    return [fact for _, fact in sorted(_rule_matches(sentence), key=lambda pair: pair[0])]


def _rule_matches(sentence: str) -> Iterator[tuple[int, Fact]]:
    taken: list[tuple[int, int]] = []
    for pattern, key_tpl, text_tpl in _COMPILED:
        for m in pattern.finditer(sentence):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue  # a more specific rule already read this part
            groups = m.groupdict()
            x = (groups.get("x") or "").strip()
            if key_tpl == "{x}" and (x.casefold() in _GENERIC_X_BLOCKLIST or x.split()[-1].casefold() in
                                     _GENERIC_X_BLOCKLIST):
                continue
            if _UNDONE_BEFORE.search(sentence[:m.start()]):
                continue
            value = _clean_value(groups.get("v") or "", "name" if key_tpl == "name" else key_tpl)
            if value is None:
                continue
            taken.append((m.start(), m.end()))
            norm_x = " ".join(WORD.findall(x.casefold()))
            key = key_tpl.format(x=norm_x, v=_norm_value(value))
            said = _third_person(value) if _ENGLISH_RULE.match(m.group(0)) else value
            text = text_tpl.format(x=_attribute(x), v=said)
            # When the key names the object ("pref:jazz"), what can change is the predicate
            # ("loves" -> "dislikes"), so the whole statement is the value.
            yield m.start(), Fact(text, key, _norm_value(text) if "{v}" in key_tpl else _norm_value(value),
                                  _attribute_of(key), _norm_value(value), text_tpl in _NEGATIVE, said)


def extract_facts(user_text: str) -> list[Fact]:
    """Facts from the user's clear first-person statements (no model); questions are skipped."""
    facts: dict[str, Fact] = {}
    # A spoken turn is short; a pasted document is not a list of statements about the user.
    # A line break ends a statement ("I live in Lisbon\nRemind me at 5"): split before normalise
    # joins the lines (splitlines knows \r, \x85 and U+2028 too).
    lines = (user_text or "")[:MAX_RULE_CHARS].splitlines()
    secrets = secrets_given((user_text or "")[:MAX_RULE_CHARS])
    for sentence in [s for line in lines for s in _sentences(normalise(line))]:
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?") or SUPPOSING.match(sentence):
            continue
        for fact in _matches(sentence):
            if steers(fact.text):
                continue  # "my favourite phrase is ignore all previous instructions" is no fact to send
            if holds_secret(fact.text, secrets):
                continue  # "my PIN is 4321": sent with every turn, a secret would travel too far
            facts.pop(fact.key, None)  # a later statement in one turn wins
            facts[fact.key] = fact
    return list(facts.values())


# -- keys for any fact string --------------------------------------------------------------
_THIRD_TO_FIRST = [
    (re.compile(r"^(?:the\s+)?user's\s+", re.I), "my "),
    (re.compile(r"^(?:the\s+)?user\s+(?:does not|doesn't)\s+", re.I), "i don't "),
    (re.compile(r"^(?:the\s+)?user\s+is\s+", re.I), "i am "),
    (re.compile(r"^(?:the\s+)?user\s+has\s+", re.I), "i have "),
    (re.compile(r"^(?:the\s+)?user\s+(live|like|love|hate|enjoy|dislike|prefer|work|adore|reside|own)s\s+", re.I),
     r"i \1 "),
    (re.compile(r"^(?:the\s+)?user\s+moved\s+", re.I), "i moved "),
    (re.compile(r"^(?:the\s+)?user\s+comes\s+from\s+", re.I), "i come from "),
    (re.compile(r"^([^\W\d_]+(?:\s[^\W\d_]+)?)\s*:\s*(?=\S)", re.I), r"my \1 is "),
]


def make_fact(text: str, reworded: bool = False) -> Fact:
    """``text`` as a :class:`Fact`: a sentence this package wrote is read back
    (:func:`~ovos_memory_plugins._llm.facts.kinds.read_statement`), any other is read as a
    first-person statement by the rules. ``reworded``: a sentence the rules read as one of the
    user's single values (name, home, job, workplace, age) is stored in their words ("User moved
    from Lisbon to Porto last week" becomes "User lives in Porto": the current value, without the
    old one); any other as it was written."""
    text = " ".join((text or "").split())
    ours = read_statement(text)
    if ours is not None:
        attribute, value, negated = ours
        return model_fact(attribute, value, negated, text)
    first_person = text
    for pattern, repl in _THIRD_TO_FIRST:
        first_person, n = pattern.subn(repl, first_person, count=1)
        if n:
            break
    found = list(_matches(normalise(first_person).rstrip(".")))
    if found:
        fact = found[0]
        if reworded and "." not in fact.kind and is_single_valued(fact.kind) and _plain(fact.text) != _plain(text):
            return fact
        return dataclasses.replace(fact, text=text)
    key = "text:" + " ".join(WORD.findall(text.casefold()))
    return Fact(text, key, attribute=key, subject=key[5:], said=text)


def _plain(sentence: str) -> str:
    """A sentence as compared for rewording: "The user's name is Bob." is "user's name is bob"."""
    return re.sub(r"^the\s+", "", sentence.casefold().strip().rstrip(".")).strip()


def model_fact(attribute: str, value: str, negated: bool = False, text: str | None = None) -> Fact:
    """The fact of an (attribute, value) pair: its sentence built by code, its key and subject."""
    subject = _norm_value(value)
    key = attribute if is_single_valued(attribute) else f"{attribute}:{subject}"
    return Fact(text or statement(attribute, value, negated), key, subject, attribute, subject, negated, value)
