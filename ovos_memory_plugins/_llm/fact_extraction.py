"""Facts from what the user said, through a model, safe with a weak one.

Measured with a 0.5B local model (docs/design-notes.md), a prompt that asks for "facts as
sentences" over the whole exchange stores the prompt's own example, the assistant's claims,
small talk and thanks. This extraction is built so that none of that can be stored:

1. **Only what the user said.** The assistant's reply is not sent (it cost a fact and a
   supersession when sent as context), and an utterance with no first-person statement
   ("Thanks!", "Goodnight!", a bare question) is not sent at all (:func:`worth_asking`).
2. **Few-shot examples** show the shape, a move (only the new city), a job change, "used to love
   X, now Y" (a negated item and a new one), several facts at once, and two utterances with
   none. Every example value is one the user would have to say for it to be kept (step 4).
3. **A schema**: ``{"facts": [{"attribute": <one of 17>, "value": <60 chars>, "negated": bool}]}``,
   sent as structured output where the endpoint supports it, parsed tolerantly anyway (a cut
   reply keeps its complete items). The stored sentence is built by code from the attribute
   and value (:func:`~ovos_memory_plugins._llm.fact_kinds.statement`).
4. **Every value in the user's words** (:func:`~ovos_memory_plugins._llm.fact_safety.snap_value`),
   and single-valued attributes only with the user's own cue: a name needs "I'm"/"my name is"/
   "call me", a home city "I live"/"moved", a workplace "I work"/"I'm at ... hospital"; a person
   needs a relation word; the city moved *from* is not the home city; a value's kind corrects
   the label (a hospital is a workplace, jazz is music).
"""
from __future__ import annotations

import collections
import json
import re
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._core.tokens import estimate_tokens, truncate_to_tokens
from ..errors import LLMContextOverflow
from .fact_kinds import ATTRIBUTES, is_single_valued
from .fact_parsing import parse_items
from .fact_rules import MAX_FACT_CHARS, Fact, model_fact, normalise
from .fact_safety import looks_like_instruction, snap_value

if TYPE_CHECKING:
    from .client import ChatClient

__all__ = ["EXAMPLE_VALUES", "SCHEMA", "clean_items", "extraction_messages", "is_small_talk", "model_facts",
           "worth_asking"]

#: At most this many items per utterance (the schema says so too).
MAX_ITEMS = 4
MAX_VALUE_CHARS = 60

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "maxItems": MAX_ITEMS,
            "items": {
                "type": "object",
                "properties": {
                    "attribute": {"type": "string", "enum": list(ATTRIBUTES)},
                    "value": {"type": "string", "maxLength": MAX_VALUE_CHARS},
                    "negated": {"type": "boolean"},
                },
                "required": ["attribute", "value", "negated"],
            },
        }
    },
    "required": ["facts"],
}

SYSTEM_PROMPT = (
    "You extract lasting facts that a user states about themselves, as JSON.\n"
    f"attribute is one of: {', '.join(ATTRIBUTES)}.\n"
    "value: a few words copied from the message. negated: true if the user does NOT or NO LONGER like, "
    "do or have it.\n"
    "For a change (moved, new job), give only the NEW value.\n"
    'Only facts about the user; greetings, thanks, questions and small talk give {"facts": []}.'
)


def _shot(*facts: tuple[str, str, bool]) -> str:
    return json.dumps({"facts": [{"attribute": a, "value": v, "negated": n} for a, v, n in facts]},
                      ensure_ascii=False)


# The example values are names and words a user would have to say for them to be kept.
_SHOTS = [
    ("Hey! My name's Tomás, nice to meet you.", _shot(("name", "Tomás", False))),
    ("I moved from Gdańsk to Oslo in March.", _shot(("home_city", "Oslo", False))),
    ("I quit the bank, now I'm an accountant at Keller Bakery.",
     _shot(("job", "accountant", False), ("workplace", "Keller Bakery", False))),
    ("I used to love reggae but now I mostly listen to opera.",
     _shot(("music", "reggae", True), ("music", "opera", False))),
    ("We have a parrot called Kiwi, and on Sundays I go rowing with my brother Luc.",
     _shot(("pet", "parrot called Kiwi", False), ("hobby", "rowing", False), ("family", "brother Luc", False))),
    ("Thanks, see you tomorrow!", _shot()),
    ("Can you tell me a joke about cats?", _shot()),
    ("Next May I'm flying to Peru with my girlfriend Ada, I'm vegan so food will be fun.",
     _shot(("trip", "Peru next May", False), ("partner", "girlfriend Ada", False), ("food", "vegan", False))),
]
#: The examples' values, which the user's words must contain for any of them to be stored.
EXAMPLE_VALUES = ("Tomás", "Gdańsk", "Oslo", "accountant", "Keller Bakery", "reggae", "opera", "parrot", "Kiwi",
                  "rowing", "Luc", "Peru", "Ada", "vegan")

# -- step 1: is the utterance worth a request? ---------------------------------------------------
_FIRST_PERSON = re.compile(
    r"\b(i|i'm|im|i've|i'd|i'll|me|my|mine|myself|we|we're|our|us|eu|meu|minha|meus|minhas|moro|sou|chamo|"
    r"chamo-me|trabalho|gosto|adoro|tenho|vou|yo|mi|mis|me llamo|vivo|ich|mein|meine|mich|mir|je|j'|mon|ma|mes|"
    r"moi)\b", re.IGNORECASE)
_SMALL_TALK = re.compile(
    r"^\W*(hi|hello|hey|thanks|thank you|thx|ok|okay|cool|nice|great|good ?night|good morning|good evening|bye|"
    r"goodbye|see you|haha|lol|yes|no|sure|obrigad[oa]|ol[áa]|tchau|boa noite|bom dia|gracias|hola|danke|merci)"
    r"\b[\W\s]*(that'?s|it'?s|you'?re|so|very|really|a lot|much|helpful|great|a star|again|there|all|everyone|"
    r"!|\.)*\W*$", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def is_small_talk(text: str) -> bool:
    """Greetings, thanks, "ok": nothing to remember."""
    return bool(_SMALL_TALK.match(" ".join(text.split())))


def worth_asking(user: str) -> bool:
    """False for an utterance that states nothing about the user: small talk, questions, no first person."""
    text = " ".join(user.split())
    if not text or is_small_talk(text):
        return False
    statements = [s for s in _SENTENCE.split(text) if s.strip() and not s.rstrip().endswith("?")]
    return any(_FIRST_PERSON.search(s) for s in statements)


# -- step 2: the request -----------------------------------------------------------------------
def _user_prompt(user: str) -> str:
    return f"User's message: {user}"


def extraction_messages(user: str, client: ChatClient | None = None, max_tokens: int = 128) -> list[dict[str, str]]:
    """The request for ``user``'s utterance, within the endpoint's context.

    A long utterance is cut to what fits; on a very small context the examples go first.
    """
    shots: list[dict[str, str]] = []
    for said, reply in _SHOTS:
        shots += [{"role": "user", "content": _user_prompt(said)}, {"role": "assistant", "content": reply}]
    limit = client.context_limit() if client is not None else 2048
    for examples in (shots, shots[:6], []):
        base = [{"role": "system", "content": SYSTEM_PROMPT}, *examples, {"role": "user", "content": _user_prompt("")}]
        used = client.estimate_prompt(base) if client is not None else estimate_tokens(json.dumps(base))
        room = int(limit / 1.1) - used - max_tokens
        if room >= min(64, estimate_tokens(user)):
            said = truncate_to_tokens(user, room)
            return base[:-1] + [{"role": "user", "content": _user_prompt(said)}]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": _user_prompt(user[:200])}]


# -- step 4: keep only what the user said ----------------------------------------------------------
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


def _fold(text: str) -> str:
    return normalise(text).casefold()


def _reason_to_drop(attribute: str, value: str, user: str) -> str | None:
    """Why an (attribute, value) the user's words support is still not this attribute's, else None."""
    if attribute == "name":
        cued = {_fold(m.group(1)) for m in _NAME_CUE.finditer(user)}
        if not any(_fold(word) in cued for word in value.split()):
            return "a name the user did not give as their own"
    if attribute == "home_city":
        moved_from = {_fold(g) for m in _MOVED_FROM.finditer(user) for g in m.groups() if g}
        if _fold(value) in moved_from:
            return "the city the user moved away from"
    cue = _CUES.get(attribute)
    if cue is not None and not cue.search(user):
        # A single-valued attribute replaces the old value, so a mislabelled item would destroy a
        # true fact: it needs the user's own cue. A person needs a relation word.
        return f"no {attribute} cue in the user's words"
    return None


def clean_items(items: Iterable[Any], user: str) -> list[Fact]:
    """The model's items that the user really stated, as facts (see the module docstring, step 4)."""
    kept: list[tuple[str, str, bool]] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        attribute = str(item.get("attribute") or "").strip().casefold().replace(" ", "_")
        value = " ".join(str(item.get("value") or "").split()).strip(" .,;:!\"'")
        negated = item.get("negated") is True or str(item.get("negated")).casefold() == "true"
        if attribute not in ATTRIBUTES or not value or len(value) > MAX_VALUE_CHARS or len(value.split()) > 8:
            continue
        if _JUNK_VALUE.match(value) or looks_like_instruction(value):
            continue
        snapped = snap_value(value, user)
        if snapped is None:
            continue
        attribute = _kind_of(attribute, snapped)
        if _reason_to_drop(attribute, snapped, user) is not None:
            continue
        if attribute == "name" and negated:
            continue
        same = next((i for i, k in enumerate(kept) if k[0] == attribute and is_single_valued(attribute)), None)
        if same is not None:  # two values of one single-valued attribute in one turn: one fact
            old = kept[same]
            if _fold(snapped) not in _fold(old[1]):
                kept[same] = (attribute, f"{old[1]}, {snapped}", old[2])
            continue
        kept.append((attribute, snapped, negated))
    facts = [model_fact(a, v, n) for a, v, n in kept]
    return [f for f in facts if len(f.text) <= MAX_FACT_CHARS]


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


_replies = _Replies()


def model_facts(client: ChatClient, user: str, max_tokens: int = 128) -> list[Fact] | None:
    """The facts the model finds in ``user``'s utterance, checked against it.

    Raises :class:`~ovos_memory_plugins.errors.LLMError` when no model answered, and returns
    None when its answer is not in the asked shape at all (prose, a list of sentences): the
    caller then falls back to the offline rules. An answer in shape with no usable item is an
    empty list.
    """
    if not worth_asking(user):
        return []
    key = (client.api_url, client.model or client.resolve_model(), user)
    items = _replies.get(key)
    if items is None:
        try:
            reply = client.chat(extraction_messages(user, client, max_tokens), max_tokens=max_tokens, schema=SCHEMA)
        except LLMContextOverflow as exc:
            if not exc.limit:
                raise
            # The server named its context (the client learnt it): the request is rebuilt to fit.
            reply = client.chat(extraction_messages(user, client, max_tokens), max_tokens=max_tokens, schema=SCHEMA)
        items, _ = parse_items(reply.text)
        if not _in_shape(items, reply.text):
            return None
        items = items[: MAX_ITEMS * 2]
        _replies.put(key, items)
    return clean_items(items, user)


def _in_shape(items: list[Any], reply: str) -> bool:
    """Objects, or JSON holding none ("[]", '{"facts": []}'); not prose or a list of sentences."""
    if items:
        return any(isinstance(item, Mapping) for item in items)
    return "[" in reply or "{" in reply
