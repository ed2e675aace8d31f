"""Facts from a conversation through a model: the exchanges and their context in, any reply shape out.

One request reads one exchange or several (``entity`` sends each exchange as it comes, or a
backlog together; ``longterm`` the turns it folds), written as the conversation went: the
assistant's question the user's message answers, the message, the assistant's reply::

    Assistant: What should I call you?
    User: Jack
    Assistant: Nice to meet you, Jack!

The request asks for ``{"facts": [{"person", "attribute", "value", "negated"}]}`` (sent as
structured output where the endpoint supports it), and whatever the model answers is read
(:func:`reply_items`): that object, a JSON array of fact sentences (the reference's format), a
list under any key, or one fact per line. Every item then passes the same checks:

* **not an instruction** ("ignore previous instructions", role tags) and not junk ("none", "hi");
* **grounded in what the user said**: a structured value is snapped to the user's words
  (:func:`~ovos_memory_plugins._llm.facts.safety.snap_value`), a sentence needs its names from
  the user's messages and most of its other words from them or from the question they answer
  (:func:`~ovos_memory_plugins._llm.facts.safety.is_grounded`); so neither the assistant's
  recommendations nor the prompt's examples become facts about the user;
* **about the right person**: what the user says of "my sister Ana" is Ana's ("User's sister
  Ana's health: allergic to peanuts"); a sentence that puts it on the user is dropped;
* **a single-valued attribute needs the user's cue** (a name "I'm"/"call me", or an answer to
  "what should I call you?"; a home city "I live"/"moved"): a mislabelled item would replace a
  true fact. The city moved *from* is not the home city.

Sentences are built by code from structured items
(:func:`~ovos_memory_plugins._llm.facts.kinds.statement`); a model's own sentences are kept as
it wrote them, and read back for what they are about
(:func:`~ovos_memory_plugins._llm.facts.rules.make_fact`).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._core.tokens import estimate_tokens, truncate_to_tokens
from ..._core.untrusted import frames_a_prompt
from ...errors import LLMContextOverflow
from .choice import CORE_ATTRIBUTES
from .kinds import ATTRIBUTES, about, is_single_valued, person_attribute, statement
from .parsing import find_json_arrays, json_object, reply_items
from .rules import MAX_FACT_CHARS, Fact, extract_facts, make_fact, model_fact, normalise
from .safety import is_grounded, snap_value, steers
from .secrets import holds_secret, secrets_given

if TYPE_CHECKING:
    from ..client import ChatClient

__all__ = ["EXAMPLE_VALUES", "Exchange", "clean_items", "exchanges_of", "extract", "extraction_messages",
           "forget_replies", "is_small_talk", "model_items", "question_in", "worth_reading"]

#: Items read per exchange of a request, at most (a reply looping on one item stops there).
MAX_ITEMS = 8
MAX_VALUE_CHARS = 60
#: Each message of an exchange is cut to this many tokens in a request (a pasted document is not
#: a statement about the user, and must not overflow a small model's context).
MAX_PART_TOKENS = 400
#: The assistant's reply matters as context only: its start.
MAX_REPLY_TOKENS = 80


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One exchange as extraction reads it.

    Attributes:
        user: what the user said.
        assistant: the assistant's reply.
        asked: the assistant's question the user's message answers ("" when it answers none).
    """

    user: str
    assistant: str = ""
    asked: str = ""

    def lines(self, whole_reply: bool = True) -> str:
        """The exchange as a request shows it (the reference's "User: ...\\nAssistant: ..." after the
        question answered). ``whole_reply=False`` leaves out a question ending the reply: the next
        message answers it (it is that exchange's ``asked``), and shown here unanswered it reads as
        a question to the extractor."""
        reply = _one_line(self.assistant)
        if not whole_reply and question_in(reply):
            reply = reply[:reply.rfind(question_in(reply))].strip()
        out = [f"Assistant: {_one_line(self.asked)}"] if self.asked else []
        out.append(f"User: {_one_line(_ends(self.user, MAX_PART_TOKENS))}")
        if reply:
            out.append(f"Assistant: {_one_line(truncate_to_tokens(reply, MAX_REPLY_TOKENS))}")
        return "\n".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _ends(text: str, max_tokens: int) -> str:
    """``text`` within ``max_tokens``: a longer one as its start and its end (a long message often
    closes with what it was about: "... anyway, my name is Marta and I live in Porto")."""
    if estimate_tokens(text) <= max_tokens:
        return text
    head = truncate_to_tokens(text, max_tokens // 2)
    words = text[len(head):].split()

    def joined(n: int) -> str:
        return f"{head} … {' '.join(words[len(words) - n:])}"

    low, high = 0, len(words)  # the most trailing words that fit (a binary search)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if estimate_tokens(joined(mid)) <= max_tokens else (low, mid - 1)
    return joined(low)


_QUESTION = re.compile(r"[^.!?\n]*\?")


def question_in(reply: str) -> str:
    """The question ending ``reply`` (the one a next message may answer), or ""."""
    text = _one_line(reply)[-600:]
    found = _QUESTION.findall(text)
    if not found or len(text) - text.rfind("?") > 40:
        return ""  # a question followed by more talk is rhetorical, or answered already
    return found[-1].strip()


SYSTEM_PROMPT = (
    "You read a conversation and write down the lasting facts the user tells about themselves and about "
    'people in their life. Write each fact as a short sentence: about the user, start with "User" '
    '("User\'s name is Tomás", "User lives in Oslo"); about someone else, name them ("User\'s brother Luc is '
    'allergic to shellfish"). When the user answers the assistant\'s question, the question says what the '
    "answer is about. Use only what the user said: what the assistant says or recommends is not a fact about "
    "the user. For a change (moved, new job), give only the new value. Reply with a JSON array of strings, "
    "[] if there are none."
)

# The example values are names and words a user would have to say for them to be kept.
_SHOTS = [
    (Exchange("Hey! My name's Tomás, nice to meet you.", "Nice to meet you, Tomás!"), ["User's name is Tomás"]),
    (Exchange("Priya.", "Lovely to meet you, Priya!", asked="What's your name?"), ["User's name is Priya"]),
    (Exchange("Kiwi.", "Kiwi, what a lovely name!", asked="And what is your parrot called?"),
     ["User's parrot is called Kiwi"]),
    (Exchange("I moved from Gdańsk to Oslo in March.", "How do you like Oslo?"), ["User lives in Oslo"]),
    (Exchange("My brother Luc is allergic to shellfish, and on Sundays I go rowing.", "Rowing is great exercise."),
     ["User's brother Luc is allergic to shellfish", "User goes rowing on Sundays"]),
    (Exchange("I used to love reggae but now I mostly listen to opera.", "Opera is wonderful."),
     ["User no longer likes reggae", "User likes opera"]),
    (Exchange("Any tips for a rainy day?", "Try the film 'Amélie' and a hot chocolate."), []),
    (Exchange("Thanks, see you tomorrow!", "See you!"), []),
]
#: The examples' values, which the user's words must contain for any of them to be stored.
EXAMPLE_VALUES = ("Tomás", "Priya", "Kiwi", "Gdańsk", "Oslo", "Luc", "shellfish", "rowing", "reggae", "opera", "Amélie")

# -- is an exchange worth a request? -------------------------------------------------------------
_SMALL_TALK = re.compile(
    r"^\W*(hi|hello|hey|thanks|thank you|thx|ok|okay|cool|nice|great|good ?night|good morning|good evening|bye|"
    r"goodbye|see you|haha|lol|yes|no|sure|obrigad[oa]|ol[áa]|tchau|boa noite|bom dia|gracias|hola|danke|merci)"
    r"\b[\W\s]*(?:(?:that'?s|it'?s|you'?re|so|very|really|a lot|much|helpful|great|a star|again|there|all|"
    r"everyone|for (?:that|everything|your help|the help))\b[\W\s]*)*$", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def is_small_talk(text: str) -> bool:
    """Greetings, thanks, "ok": nothing to remember."""
    return bool(_SMALL_TALK.match(" ".join(text.split())))


# A sentence that asks or orders by its form, as speech to text writes it (no "?"): "what are the
# benefits of walking", "can you recommend a book", "explain what a black hole is", "set a timer".
# A small model made facts of these ("User explains what a black hole is"). Only unmistakable
# openings: a statement without its subject ("Was born in Lisbon", "Read a lot of sci-fi") and the
# words that also mean "I eat", "because" or "when" in Portuguese and Spanish are read as said.
_END = r"(?![\w'])"
_ASKS = re.compile(
    r"^\W*(?:(?:please|ok|okay|so|and|hey|now)\W+)*(?:"
    rf"(?:what|what's|whats|who|who's|where|where's|when|why|how|which|whose){_END}"
    r"|(?:is|are|was|were|do|does|did|can|could|would|will|should|shall|may|might|have|has)\s+"
    rf"(?:you|it|there|this|that|he|she|they){_END}"
    r"|(?:tell|give|show|send|remind|let)\s+(?:me|us)\b"
    r"|(?:explain|describe|define|translate|summari[sz]e|calculate|convert|spell|repeat|recommend|suggest|list|find"
    r"|search|look\s+up|play|set|turn|open|close|write|sing|say)\s+(?:what|how|why|who|where|when|which|a|an|the"
    rf"|me|us|some|something|it|this|that|your|to|for|on|off|up|one){_END}"
    r"|o\s+que|qual|quais|quem|qu[ée]\s+é|diz-me|conta-me|explica|toca|p[õo]e|qué|cuál(?:es)?|quién(?:es)?|dónde"
    r"|cuándo|cómo|por\s+qué|dime|cuéntame|pon|wer|wo|wann|warum|welche[rsnm]?|erkl[äa]re?|sag\s+mir|spiel"
    rf"|qu'est-ce|quel(?:le)?s?|o[ùu]|pourquoi|explique|dis-moi|joue){_END}", re.IGNORECASE)
# What makes it say something of the user all the same: "can you recommend a book for my son",
# "call me Bob" (an order naming the user); in the other languages, their pronouns.
_SAYS_OF_ME = re.compile(
    r"(?<![\w'])(?:i|i'm|im|i've|i'd|i'll|my|mine|myself|we|we're|our|ours|call\s+me|eu|meu|minha|meus|minhas|n[óo]s"
    r"|noss[oa]s?|chama-me|yo|mis?|nosotros|nuestr[oa]s?|ll[áa]mame|ich|mir|mich|mein\w*|wir|uns|unser\w*"
    r"|nenn\s+mich|je|j'|m'|moi|mon|ma|mes|nous|notre|nos|appelle[sz]?-moi)(?![\w'])", re.IGNORECASE)


#: The pronoun right after an order's verb: to whom it is said ("explain me", "erkläre mir", "joue-moi").
_ORDERS_OBJECT = re.compile(r"[\s-]*(?:me|us|mir|mich|uns|moi|nous)(?![\w'])", re.IGNORECASE)


def _asks_only(sentence: str) -> bool:
    """Whether ``sentence`` is a question or an order to the assistant that says nothing of the user."""
    sentence = sentence.replace("\u2019", "'")  # "j’étais", "can’t": the apostrophe a keyboard types
    if sentence.rstrip().endswith("?"):
        return True
    opening = _ASKS.match(sentence)
    if opening is None:
        return False
    # After the opening and its own pronoun ("sag mir", "erkläre mir", "explique-moi"), which is
    # the order's, not the user's.
    rest = _ORDERS_OBJECT.match(sentence, opening.end())
    return not _SAYS_OF_ME.search(sentence, rest.end() if rest else opening.end())


def worth_reading(exchange: Exchange) -> bool:
    """False only for small talk, and for bare questions and orders that answer nothing: an answer
    to the assistant's question is read, and so is a statement with or without "I"."""
    text = _one_line(exchange.user)
    if not text or is_small_talk(text):
        return False
    if exchange.asked:
        return True
    return any(s.strip() and not _asks_only(s) for s in _SENTENCE.split(text))


def exchanges_of(messages: Iterable[Any]) -> list[Exchange]:
    """The exchanges in a run of messages (dicts or AgentMessages): each user message with the
    reply after it and the question before it; a user message with no reply is one too."""
    from ..summaries.text import role_content

    out: list[Exchange] = []
    user = asked = ""
    for role, text in map(role_content, messages):
        text = text.strip()
        if role == "user" and text:
            if user:
                out.append(Exchange(user, "", asked))
                asked = ""
            user = text
        elif role == "assistant" and text:
            if user:
                out.append(Exchange(user, text, asked))
                user = ""
            asked = question_in(text)
    if user:
        out.append(Exchange(user, "", asked))
    return out


# -- the request -----------------------------------------------------------------------------------
def _conversation(exchanges: Sequence[Exchange]) -> str:
    return "\n\n".join(e.lines(whole_reply=False) for e in exchanges)


def extraction_messages(exchanges: Sequence[Exchange], client: ChatClient | None = None,
                        max_tokens: int = 128) -> list[dict[str, str]]:
    """The request for ``exchanges``, within the endpoint's context: on a small context the
    examples go first, then the oldest exchanges."""
    shots: list[dict[str, str]] = []
    for exchange, facts in _SHOTS:
        shots += [{"role": "user", "content": exchange.lines(whole_reply=False)},
                  {"role": "assistant", "content": json.dumps(facts, ensure_ascii=False)}]
    limit = client.context_limit() if client is not None else 2048

    def size(request: list[dict[str, str]]) -> int:
        return client.estimate_prompt(request) if client is not None else estimate_tokens(json.dumps(request))

    system = {"role": "system", "content": SYSTEM_PROMPT}
    for examples in (shots, shots[:10], []):
        for first in range(len(exchanges)):
            request = [system, *examples, {"role": "user", "content": _conversation(exchanges[first:])}]
            if size(request) + max_tokens <= int(limit / 1.1):
                return request
    last = exchanges[-1]
    return [system, {"role": "user", "content": Exchange(last.user[:400], "", last.asked[:200]).lines()}]


# -- keep only what the user said ------------------------------------------------------------------
_JUNK_VALUE = re.compile(
    r"^(hi|hello|hey|thanks?|thank you|good ?night|good morning|bye|goodbye|yes|no|ok|okay|none|null|n/?a|unknown|"
    r"user|the user|nothing|true|false|assistant)\W*$", re.IGNORECASE)
_NAME_CUE = re.compile(r"(?:\bi'?m|\bi am|\bmy name(?:'s| is)|\bcall me|\bname'?s|\bme chamo|\bchamo-me|"
                       r"\bsou\s+(?:a|o)?|\bme llamo|\bich hei(?:ß|ss)e|\bje m'appelle)\s+(?:called\s+)?"
                       r"([^\W\d_][\w'-]*)", re.IGNORECASE)
_CUES = {
    "home_city": re.compile(
        r"\b(?:i|we)(?:'ve| have)?\s+(?:just\s+|now\s+|currently\s+|still\s+)?(?:live|moved|relocated)\b|"
        r"\b(?:i'?m|i am|we'?re|we are)\s+(?:now\s+)?(?:living|moving|based|settled)\b|\bmoved\s+(?:to|here)\b|"
        r"\bmy (?:new )?(?:home|city|town|flat|apartment|house)\b|\b(?:eu\s+)?(?:moro|vivo)\b|\bmudei-me\b|"
        r"\bme mudé\b|\bich wohne\b|\bj'habite\b", re.IGNORECASE),
    "workplace": re.compile(
        r"\b(?:i|we)\s+(?:now\s+|still\s+|currently\s+)?(?:work|started|joined|teach)\b|"
        r"\b(?:i'?m|i am)\s+(?:now\s+|still\s+)?(?:working|employed|at\s+.{0,40}\b(?:hospital|clinic|school|"
        r"university|office|company|bank|shop|store|factory|lab)\b)|\bmy (?:new )?(?:job|employer|office|"
        r"workplace|company|boss)\b|\bnew job\b|\btrabalho\b|\btrabajo\b|\bich arbeite\b|\bje travaille\b",
        re.IGNORECASE),
    "job": re.compile(
        r"\b(?:work|working)\s+as\b|\bas an?\s+\w+|\b(?:i'?m|i am)\s+(?:now\s+)?an?\s+\w+|\bmy (?:new )?job\b|"
        r"\bprofession\b|\btrabalho como\b|\bsou\s+\w+|\btrabajo como\b|\bich bin\b|\bje suis\b", re.IGNORECASE),
    "age": re.compile(r"\b(?:i'?m|i am|i turn(?:ed)?)\s+\d+|\byears? old\b|\btenho \d+ anos\b", re.IGNORECASE),
    "partner": re.compile(r"\b(?:partner|boyfriend|girlfriend|husband|wife|fianc[ée]e?|spouse|namorad[ao]|marido|"
                          r"mulher|esposa?)\b", re.IGNORECASE),
    "friend": re.compile(r"\b(?:friends?|buddy|mate|amig[ao]s?)\b", re.IGNORECASE),
    "family": re.compile(r"\b(?:mum|mom|mother|dad|father|parents?|sister|brother|son|daughter|kids?|children|aunt|"
                         r"uncle|cousin|grand\w+|m[ãa]e|pai|irm[ãa]o?|filh[oa]s?)\b", re.IGNORECASE),
}
_MOVED_FROM = re.compile(r"\bfrom\s+([^\W\d_][\w' -]*?)\s+to\b|\bde\s+(\w+)\s+para\b", re.IGNORECASE)
# A value's kind says more than a weak model's label: a hospital is a workplace, jazz is music.
_VALUE_KIND = [
    ("workplace", re.compile(r"\b(hospital|clinic|school|university|college|office|company|bank|caf[eé]|restaurant|"
                             r"shop|store|hotel|factory|lab|laboratory|agency|firm|startup|escola|empresa|"
                             r"universidade|cl[ií]nica)\b", re.IGNORECASE)),
    ("music", re.compile(r"\b(jazz|fado|rock|pop|classical|hip[- ]hop|rap|metal|opera|reggae|blues|techno|samba|"
                         r"bossa nova|k-pop|indie|punk|folk|country music|soul|funk|r&b|edm|salsa|tango|flamenco|"
                         r"kizomba|music|m[úu]sica)\b", re.IGNORECASE)),
    ("food", re.compile(r"\b(vegetarian|vegan|pescatarian|gluten|lactose|halal|kosher|keto|vegetariana?|vegana?)\b",
                        re.IGNORECASE)),
    ("pet", re.compile(r"\b(cat|dog|kitten|puppy|parrot|rabbit|hamster|guinea pig|turtle|tortoise|horse|budgie|"
                       r"goldfish|gat[oa]|c[ãa]o|cadela)\b", re.IGNORECASE)),
]


def _kind_of(attribute: str, value: str) -> str:
    if attribute in ("name", "partner", "friend", "family"):
        return attribute  # "my friend's café" is about the friend
    for kind, pattern in _VALUE_KIND:
        if pattern.search(value):
            return kind
    return attribute


_ASKS_NAME = re.compile(r"\b(call you|your name|who are you|you called|you go by|como te chamas|c[oó]mo te llamas)\b",
                        re.IGNORECASE)
_SECOND_TO_FIRST = [(re.compile(r"\byou're\b", re.I), "I'm"), (re.compile(r"\byou are\b", re.I), "I am"),
                    (re.compile(r"\byour\b", re.I), "my"), (re.compile(r"\byou\b", re.I), "I")]
_RELATION = (r"(?:mum|mom|mother|dad|father|parents?|sister|brother|son|daughter|kids?|children|aunt|uncle|cousin|"
             r"grand\w+|wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|friend|boss|colleague|co-?worker|"
             r"neighbou?r|room-?mate|flatmate|teacher|doctor|m[ãa]e|pai|irm[ãa]o?|filh[oa]|amig[oa]|namorad[ao])")
#: "my sister Ana", "my best friend", "a minha irmã": someone in the user's life.
_MENTION = re.compile(r"\b(?:my|minha|meu|mi)\s+(?:(?:little|big|older|younger|elder|best|baby|twin|new|old)\s+)?"
                      rf"(?P<rel>{_RELATION})\b(?:,?\s+(?P<name>(?-i:[A-Z\u00c0-\u00de][\w'-]+)))?", re.IGNORECASE)
_USER_SUBJECT = re.compile(r"\b(?:i|i'm|i've|i'd|we|we're|eu|yo)\b", re.IGNORECASE)
_CLAUSE = re.compile(r"(?<=[.!?;])\s+|\n+|,\s+(?:and|but)\s+")
#: Not a sentence about the user: the assistant speaking ("Porto is treating you"), a question, or
#: another subject ("A carrot cake would be perfect").
_NOT_ABOUT_THE_USER = re.compile(r"\b(?:you|your|yours)\b|\?\s*$|^(?:a|an|the|this|that|it)\s+(?!user\b)|"
                                 # the user's words pasted after "User's": "User's receptionist calls me Maria"
                                 r"^(?:the\s+)?user\b.*\b(?:me|my|i|i'm)\b", re.IGNORECASE)
#: Events of the conversation itself, not lasting facts ("User asked for a book").
_NOT_DURABLE = re.compile(r"\b(asked|asks|asking|wants? to know|requested|thanked|greeted|said (?:hi|hello|thanks))\b",
                          re.IGNORECASE)


def _fold(text: str) -> str:
    return normalise(text).casefold()


#: "User is a beagle" from "My dog is called Rex, he is a beagle": what the user says is, the
#: value of a "User is ..." fact, said of someone else ("he is", "she's", "they are").
_USER_IS = re.compile(r"^(?:the\s+)?user\s+is\s+(?:(?:a|an|the)\s+)?(?P<value>\S.*)$", re.IGNORECASE)
_THIRD_PERSON_IS = re.compile(r"\b(?:he|she|it|they)(?:\s+(?:is|are|was|were)|'s|\u2019s|'re|\u2019re)"
                              r"(?:\s+(?:a|an|the|really|very|so|such))*\s*$", re.IGNORECASE)


def _said_of_a_third_person(fact: str, user: str) -> bool:
    """Whether ``fact`` ("User is a beagle") puts on the user what they said of someone else."""
    found = _USER_IS.match(fact)
    if found is None:
        return False
    value, folded = _fold(found.group("value")), _fold(user)
    at = folded.find(value)
    return at >= 0 and _THIRD_PERSON_IS.search(folded[:at]) is not None


def _first_person(question: str) -> str:
    """The assistant's question as the user would say it ("where do you live" -> "where do I live")."""
    for pattern, repl in _SECOND_TO_FIRST:
        question = pattern.sub(repl, question)
    return question


def _reason_to_drop(attribute: str, value: str, exchange: Exchange) -> str | None:
    """Why an (attribute, value) the user's words support is still not this attribute's, else None."""
    user = exchange.user
    answer_to = _first_person(exchange.asked)
    if attribute == "name":
        cued = {_fold(m.group(1)) for m in _NAME_CUE.finditer(user)}
        named = _ASKS_NAME.search(exchange.asked) is not None  # "What should I call you?" "Jack."
        if not named and not any(_fold(word) in cued for word in value.split()):
            return "a name the user did not give as their own"
    if attribute == "home_city":
        moved_from = {_fold(g) for m in _MOVED_FROM.finditer(user) for g in m.groups() if g}
        if _fold(value) in moved_from:
            return "the city the user moved away from"
    cue = _CUES.get(attribute)
    if cue is not None and not (cue.search(user) or cue.search(answer_to)):
        # A single-valued attribute replaces the old value, so a mislabelled item would destroy a
        # true fact: it needs the user's own cue (or the question answered). A person needs a relation word.
        return f"no {attribute} cue in the user's words"
    return None


def said_of(words: str, user: str) -> str | None:
    """Who the user says ``words`` of when it is someone in their life ("sister Ana"), else None.

    ``words`` must follow the mention in one clause with no "I" between ("my sister Ana is
    allergic to peanuts"; not "my sister Ana visited and I cooked pasta").
    """
    target = _fold(words)
    if not target:
        return None
    for clause in _CLAUSE.split(user):
        folded = _fold(clause)
        at = folded.find(target)
        if at < 0:
            continue
        mention = next((m for m in _MENTION.finditer(clause) if m.end() <= at), None)
        if mention is None or _USER_SUBJECT.search(clause[mention.end():at]):
            return None  # said of the user
        return " ".join(p for p in (mention.group("rel"), mention.group("name")) if p)
    return None


def _person_of(item: Mapping[str, Any], attribute: str, value: str, user: str) -> str | None:
    """The person a structured item is about ("" the user), in the user's words; None: not said."""
    person = " ".join(str(item.get("person") or "").split()).strip(" .,;:!\"'")
    if _fold(person) in ("", "user", "the user", "me", "i", "myself", "none", "null"):
        if attribute in ("partner", "friend", "family"):
            return ""  # "sister Ana" is the user's family
        return said_of(value, user) or ""
    return snap_value(person, user)


def _structured(item: Mapping[str, Any], exchange: Exchange) -> tuple[str, str, bool, str] | None:
    """(attribute, value, negated, person) of a structured item the user really stated, else None."""
    attribute = str(item.get("attribute") or item.get("key") or item.get("type") or "").strip().casefold()
    named = _own_label(attribute)  # "city" is home_city
    attribute = named if named is not None and not named.startswith("User ") else attribute.replace(" ", "_")
    value = _one_line(str(item.get("value") or "")).strip(" .,;:!\"'")
    negated = item.get("negated") is True or str(item.get("negated")).casefold() == "true"
    if attribute not in ATTRIBUTES or not value or len(value) > MAX_VALUE_CHARS or len(value.split()) > 8:
        return None
    if _JUNK_VALUE.match(value) or steers(value):
        return None
    snapped = snap_value(value, exchange.user)
    if snapped is None:
        return None
    person = _person_of(item, attribute, snapped, exchange.user)
    if person is None:
        return None
    attribute = _kind_of(attribute, snapped)
    if not person and _reason_to_drop(attribute, snapped, exchange) is not None:
        return None
    if attribute == "name" and negated:
        return None
    return attribute, snapped, negated, person


def _content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[^\W\d_][\w'-]*", text) if len(w) > 3]


#: A label before a sentence about the user ("Fact: the user is Ana").
_LABEL = re.compile(r"^[^\W\d_][\w ]{0,20}:\s+(?=(?:the\s+)?user\b)", re.IGNORECASE)
_FIRST_PERSON_START = re.compile(r"^(?:i|i'm|i've|i'd|my|we|we're|our)\b", re.IGNORECASE)
#: "User's sister Ana is ...", "User's best friend's job is ...": a fact about someone in the user's life.
_ABOUT_PERSON = re.compile(
    r"^(?:the\s+)?user'?s\s+(?P<person>(?:(?:little|big|older|younger|elder|best|baby|twin|new|old)\s+)?"
    rf"{_RELATION}(?:\s+(?-i:[A-Z\u00c0-\u00de][\w'-]+))?)(?P<own>'s)?\s+(?P<rest>\S.*)$", re.IGNORECASE)


def read_fact(text: str) -> Fact:
    """A fact sentence and what it is about, in the rules' words where they read it ("User
    moved from Lisbon to Porto" is "User lives in Porto"); one about someone in the user's life
    is theirs (its attribute and key carry the person), so it supersedes only their facts."""
    found = _ABOUT_PERSON.match(text)
    if found is None:
        return make_fact(text, reworded=True)
    inner = make_fact(("User's " if found.group("own") else "User ") + found.group("rest"), reworded=True)
    prefix = person_attribute(found.group("person"), "")
    return dataclasses.replace(inner, text=about(found.group("person"), inner.text), key=prefix + inner.key,
                               attribute=prefix + inner.kind)


def _sentence(text: str, exchange: Exchange) -> list[Fact]:
    """A fact sentence the model wrote, if the user said it, about the person it names."""
    text = re.sub(r"^\d{1,2}[.)]\s+", "", _one_line(text).strip(" -*\u2022\"'")).removesuffix(".")
    text = _LABEL.sub("", text)
    text = text[:1].upper() + text[1:]
    if not text or len(text) > MAX_FACT_CHARS or text.endswith(":") or _NOT_DURABLE.search(text):
        return []
    if _NOT_ABOUT_THE_USER.search(text):
        return []
    if _JUNK_VALUE.match(text) or not is_grounded(text, exchange.user, context=exchange.asked):
        return []
    if _said_of_a_third_person(text, exchange.user):
        return []
    if _FIRST_PERSON_START.match(text):
        # The user's own words copied: read as the offline rules read a statement (third person).
        return [read_fact(f.text) for f in extract_facts(text)]
    mentions = list(_MENTION.finditer(exchange.user))
    names_them = any(re.search(rf"\b{re.escape(m.group('rel'))}\b", text, re.IGNORECASE)
                     or (m.group("name") and m.group("name") in text) for m in mentions)
    if not names_them and not re.search(r"\buser\b", text, re.IGNORECASE):
        return []  # about no one ("Near the river"): a fact says whose it is
    if mentions and not names_them and any(said_of(w, exchange.user) for w in _content_words(text)):
        return []  # the user said it of someone else; this sentence puts it on the user
    fact = read_fact(text)
    if fact.attribute in ("name", "home_city") and _reason_to_drop(fact.attribute, fact.said or fact.subject, exchange):
        # As for a structured item: "You're called Jarvis?" or "You live in Paris, right?" would
        # replace the user's own name or city.
        return []
    return [fact]


# A model that writes its own labels instead of sentences ("Location: Lyon", {"city": "Lyon"}):
# the labels it is likely to use, as the schema's attributes; or, for a verb, the sentence's start.
_OWN_LABELS: dict[str, str] = {
    **{attribute: attribute for attribute in ATTRIBUTES if attribute != "other"},
    **{label: attribute for attribute, label in ATTRIBUTES.items() if attribute != "other"},
    # Not "location" nor "home": where the user is now, or comes from, is not where they live.
    "first name": "name", "full name": "name", "city": "home_city", "current city": "home_city",
    "residence": "home_city", "lives in": "home_city", "occupation": "job", "profession": "job",
    "job title": "job", "works as": "job", "employer": "workplace", "company": "workplace",
    "works at": "workplace", "pets": "pet", "hobbies": "hobby", "interests": "hobby", "interest": "hobby",
    "activities": "hobby", "favorite music": "music", "favourite music": "music", "music taste": "music",
    "languages": "language", "favorite food": "food", "favourite food": "food", "diet": "food",
    "allergy": "health", "allergies": "health", "spouse": "partner", "wife": "partner", "husband": "partner",
    "girlfriend": "partner", "boyfriend": "partner", "friends": "friend", "travel plans": "trip",
    "likes": "User likes", "loves": "User loves", "enjoys": "User enjoys", "dislikes": "User dislikes",
    "preferences": "User likes", "preference": "User likes",
}
_OWN_LABEL = re.compile(r"^[\s*_\-\u2022\d.)]*(?:(?:the\s+)?user'?s?\s+)?(?P<label>[^\W\d][\w '-]{0,24}?)"
                        r"[\s*_]*:[\s*_]*(?P<value>\S.*)$", re.IGNORECASE)


def _own_label(label: str) -> str | None:
    return _OWN_LABELS.get(" ".join(label.replace("_", " ").casefold().split()))


def _relabelled(item: Any) -> list[Any]:
    """A fact under a label of the model's own, as the schema's items: ``{"city": "Lyon"}`` and
    ``"City: Lyon"`` as ``{"attribute": "home_city", "value": "Lyon"}``, ``"Likes: cycling"`` as
    "User likes cycling" (each still checked against what the user said); [] for any other.
    An object's ``person`` and ``negated`` go with each of its values."""
    carried: dict[str, Any] = {}
    if isinstance(item, str):
        found = _OWN_LABEL.match(_one_line(item).strip())
        pairs = [(found.group("label"), found.group("value"))] if found else []
    elif isinstance(item, Mapping) and not {"attribute", "key", "type"} & set(item):
        pairs = [(str(k), v) for k, v in item.items() if k not in _CARRIED]
        carried = {k: item[k] for k in _CARRIED if k in item}
    else:
        return []
    out: list[Any] = []
    for label, values in pairs:
        meant = _own_label(label)
        for value in values if isinstance(values, list) else [values]:
            if meant is None or not _plain_value(value, meant):
                continue
            value = str(value).strip()
            if not meant.startswith("User "):
                out.append({"attribute": meant, "value": value, **carried})
            elif not carried:  # a sentence of the user's own: it cannot say someone else, or "not"
                out.append(f"{meant} {value}")
    return out


_CARRIED = ("person", "negated")


def _plain_value(value: Any, meant: str) -> bool:
    """A text, or a number for an age: the values a labelled fact can have."""
    if isinstance(value, bool):
        return False
    return isinstance(value, str) or (isinstance(value, int) and meant == "age")


def model_items(reply: str) -> list[Any]:
    """The items of a fact reply (:func:`reply_items`), and the reply's object itself when it is
    a record of labelled values (``{"name": "Ana", "hobbies": [...]}``: its lists alone would
    lose the name)."""
    items = reply_items(reply)
    record = json_object(reply)
    if record is not None and any(_own_label(str(k)) for k in record):
        items.append(record)
    return items


def _fact(attribute: str, value: str, negated: bool, person: str) -> Fact:
    if not person:
        return model_fact(attribute, value, negated)
    return model_fact(person_attribute(person, attribute), value, negated,
                      about(person, statement(attribute, value, negated)))


def clean(items: Iterable[Any], exchange: Exchange) -> list[Fact]:
    """The model's items (objects or sentences, or values under labels of its own) that the user
    really stated, as facts."""
    if frames_a_prompt(exchange.user):  # written for the model, not said: no fact from it
        return []
    kept: list[tuple[str, str, bool, str]] = []
    sentences: list[Fact] = []
    for item in items:
        said = _sentence(item, exchange) if isinstance(item, str) else []
        for one in [] if said else _relabelled(item) or ([] if isinstance(item, str) else [item]):
            if isinstance(one, str):
                said += _sentence(one, exchange)
            elif isinstance(one, Mapping):
                _keep(kept, _structured(one, exchange))
        for fact in said:
            if all(f.text.casefold() != fact.text.casefold() for f in sentences):
                sentences.append(fact)
    facts = [_fact(*found) for found in kept]
    secrets = secrets_given(exchange.user, exchange.asked)
    return [f for f in [*facts, *sentences] if len(f.text) <= MAX_FACT_CHARS and not holds_secret(f.text, secrets)]


def _keep(kept: list[tuple[str, str, bool, str]], found: tuple[str, str, bool, str] | None) -> None:
    """Add a structured item's (attribute, value, negated, person) to ``kept``: two values of one
    single-valued attribute in one turn make one fact."""
    if found is None:
        return
    attribute, value, _, person = found
    same = next((i for i, k in enumerate(kept) if k[0] == attribute and k[3] == person
                 and is_single_valued(attribute)), None)
    if same is None:
        kept.append(found)
        return
    old = kept[same]
    if _fold(value) not in _fold(old[1]):
        kept[same] = (attribute, f"{old[1]}, {value}", old[2], person)


def clean_items(items: Iterable[Any], user: str, asked: str = "") -> list[Fact]:
    """:func:`clean` for one user message (and the question it answers)."""
    return clean(items, Exchange(user, "", asked))


def _owner(fact: Fact, exchanges: Sequence[Exchange]) -> int:
    """The newest exchange whose user message holds the fact's value (a batch's facts are merged in
    the order they were said, so a later change supersedes an earlier statement)."""
    words = _fold(fact.said or fact.text).split()
    for index in range(len(exchanges) - 1, -1, -1):
        said = _fold(exchanges[index].user)
        if words and sum(w in said for w in words) * 2 >= len(words):
            return index
    return len(exchanges) - 1


# -- the call ---------------------------------------------------------------------------------------
class _Replies:
    """Parsed replies by (endpoint, model, utterance): at temperature 0 the same request gets the
    same reply, so memories sharing an endpoint (and a repeated "I'm home!") ask once."""

    def __init__(self, size: int = 512):
        self._items: collections.OrderedDict[tuple[str, str, str], list[Any]] = collections.OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> list[Any] | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple[str, str, str], items: list[Any]) -> None:
        with self._lock:
            self._items[key] = items
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_replies = _Replies()


def forget_replies() -> None:
    """Drop every parsed reply kept in RAM: its key holds what the user said, and a forget must
    leave that nowhere (a reply is asked again when the same words come again)."""
    _replies.clear()


def extract(client: ChatClient, exchanges: Sequence[Exchange], max_tokens: int = 128) -> list[tuple[int, Fact]]:
    """The facts the model finds in ``exchanges``, in one request, checked against what the user said.

    Returns ``(index of the exchange it was said in, fact)`` pairs in the order said (merge them in
    that order: a later change supersedes an earlier statement). Exchanges not worth reading are
    not sent; none worth reading costs no request. When every fact the model proposed fails the
    checks, the offline rules' facts of those exchanges are returned. Raises
    :class:`~ovos_memory_plugins.errors.LLMError` when no model answered.
    """
    sent = [i for i, e in enumerate(exchanges) if worth_reading(e)]
    if not sent:
        return []
    batch = [exchanges[i] for i in sent]
    key = (client.api_url, client.model or client.resolve_model(), _conversation(batch))
    items = _replies.get(key)
    if items is None:
        try:
            reply = client.chat(extraction_messages(batch, client, max_tokens), max_tokens=max_tokens)
        except LLMContextOverflow as exc:
            if not exc.limit:
                raise
            # The server named its context (the client learnt it): the request is rebuilt to fit.
            reply = client.chat(extraction_messages(batch, client, max_tokens), max_tokens=max_tokens)
        items = model_items(reply.text)[: MAX_ITEMS * len(batch)]
        if not items and not _an_empty_answer(reply.text):
            return _by_rules(sent, batch)  # neither facts nor an empty list ("asdf ]]} {{ ["): a bad answer
        _replies.put(key, items)
    together = Exchange("\n".join(e.user for e in batch), "", "\n".join(e.asked for e in batch if e.asked))
    found = [(sent[_owner(fact, batch)], fact) for fact in clean(items, together)]
    if items and not found:
        # The model proposed facts and every one failed the checks (a small model gives the
        # assistant's name as the user's): a bad answer, not "nothing here". The offline rules
        # read those exchanges instead; a reply proposing nothing ("[]") still stores nothing.
        return _by_rules(sent, batch)
    # Who the user is first, as the rules find them (a stable sort keeps that within an exchange).
    return sorted([*(_core_left_out(sent, batch, found) if found else []), *found], key=lambda pair: pair[0])


def _by_rules(sent: Sequence[int], batch: Sequence[Exchange]) -> list[tuple[int, Fact]]:
    return [(index, fact) for index, exchange in zip(sent, batch) for fact in extract_facts(exchange.user)]


def _core_left_out(sent: Sequence[int], batch: Sequence[Exchange],
                   found: Sequence[tuple[int, Fact]]) -> list[tuple[int, Fact]]:
    """The rules' name or home city of an exchange, each where the model's facts of it leave it
    out: a real small model kept "User lives in Ghent" of "I'm Tomas and I live in Ghent" and
    dropped the name, which every turn needs. Left out means no fact of that kind and none naming
    the value ("User's first name is Tomas"). The rules' other facts are not added: the model's
    reading stands, and so does its "[]"."""
    kinds = {(i, fact.kind) for i, fact in found}
    said = {i: _fold(" ".join(fact.text for j, fact in found if j == i)) for i in sent}
    return [(i, fact) for i, fact in _by_rules(sent, batch) if fact.kind in CORE_ATTRIBUTES and not fact.negated
            and (i, fact.kind) not in kinds and _fold(fact.value) not in said[i]]


def _an_empty_answer(reply: str) -> bool:
    """Whether a reply with no items said "none" as asked (an empty list or object), not junk."""
    return bool(find_json_arrays(reply)) or json_object(reply) is not None
