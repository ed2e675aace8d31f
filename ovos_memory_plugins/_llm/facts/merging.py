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

from .kinds import ATTRIBUTES, STOP_WORDS, is_single_valued, statement, subject_of, wordset
from .rules import SUPPOSING, UNDOING, Fact, make_fact, model_fact, normalise

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

    ``now``: when ``found`` was said (an import's time; default: now). A fact dated before the
    fact it contradicts was stated goes to the history, superseded by it, instead of replacing
    it. Without ``now`` a fact always supersedes: the user said it just now, whatever a clock
    set back since stamped on the old one.

    Returns a new dict (the caller's is not changed) with ``facts``, ``meta`` and ``history``,
    and any other keys ``state`` had.
    """
    dated = now is not None  # said just now, a fact supersedes whatever the clock said before
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
        newer = [t for t in rivals if _said_at(meta[t]) > now] if dated else []
        if newer:
            # Said before what is known now (an older export imported, a session moved into its
            # person late): what was said since already superseded it.
            if not any(isinstance(h, Mapping) and h.get("text") == fact.text for h in history):
                history.append({**_meta(fact, sid, now, source), "text": fact.text,
                                "superseded_at": _said_at(meta[newer[0]]), "superseded_by": newer[0]})
                history.sort(key=_superseded_at)
            continue
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


def _said_at(meta: Mapping[str, Any]) -> float:
    when = meta.get("ts")
    return float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else 0.0


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


# A pet's end ("Rex died", "my dog passed away", "we had to put Rex down", "we gave our cat
# away"), in the languages the rules read: said after its name or the user's own word for it ("my
# dog", not "my neighbour's dog" nor "a dog"), or before it. A sentence that asks, supposes,
# dreams or tells a story, and "almost", "not", "thought" between, end nothing.
# "is dead" and "didn't make it" only where the clause ends ("dead tired", "didn't make it to the park").
_ENDED_AFTER = (r"(?:died|passed\s+away|is\s+no\s+longer\s+with\s+us"
                r"|(?:is\s+dead|didn't\s+make\s+it)(?=\s*(?:[.,;!]|$|now))"
                r"|was\s+(?:put\s+down|put\s+to\s+sleep|euthani[sz]ed)|crossed\s+the\s+rainbow\s+bridge|morreu"
                r"|faleceu|muri[óo]|falleci[óo]|ist\s+(?:gestorben|tot|verstorben)|est\s+(?:morte?|d[ée]c[ée]d[ée]e?)"
                r"(?!\s+de\s+rire))")
_ENDED_BEFORE = (r"(?:rehomed|re-homed|buried|(?:had\s+to\s+)?put(?=\s+\S+(?:\s+\S+)?\s+(?:down|to\s+sleep)\b)"
                 r"|g[ai]ve(?=\s+\S+(?:\s+\S+)?\s+away\b)|sold|got\s+rid\s+of|scrapped|traded\s+in)")
# The thing itself, not "my car seat", "my dog's bed", "my car insurance": the clause ends, or
# what follows says when, to whom or how.
_THE_THING_ITSELF = (r"\b(?!')(?=\s*(?:[.,;:!?)]|$)|\s+(?:to|for|on|at|in|last|yesterday|today|this|that|and|but"
                     r"|because|after|before|when|since|back|off|away|down|already|finally|recently|earlier|ago"
                     r"|online|too|as|with|a|an|the|some|\d+)\b)")
# "sold me my first car": the user got it.
_TO_SOMEONE = re.compile(r"\b(?:me|us|him|her|them)\b")
# Words just before such a verb that keep it from happening: "I almost sold my car", "I won't
# sell", "I want to give Rex away" (not "we had to give Rex away").
_NOT_DONE = re.compile(r"(?:\b(?:almost|nearly|not|never|(?<!had\s)to|will|would|should|could|might|may)|n't)"
                       r"\s+(?:\w+\s+)?$")
_MAY_END = re.compile(rf"\b(?:{_ENDED_AFTER}|{_ENDED_BEFORE})")
_OURS = (r"(?:my|our|mi|nuestr[oa]|meu|minha|nosso|nossa|mein|meine|unser|unsere|mon|ma|notre)\s+"
         r"(?:(?:old|little|sweet|beloved|poor|dear|lovely|big|young|first|family|faithful|velho|velha|querid[oa]"
         r"|viej[oa]|alter|alte|lieber|liebe|vieux|vieille|cher|ch[èe]re)\s+){0,2}")
# A sentence where an end is not the pet's: a question, a supposition, a dream, a story, someone
# else's; and words that undo it between the pet and its end.
_NOT_REAL = re.compile(r"\?\s*$|\b(?:dream(?:t|ed|s)?|thought|feared|worried|afraid|sonhei|so[ñn][ée]|tr[äa]umte"
                       r"|r[êe]v[ée]|game|movie|film|book|show|series|jogo|juego|spiel|jeu)\b")
_UNDONE = re.compile(rf"\b(?:{UNDOING}|almost|nearly|not|never|thought|if|would|could|might|will|my|his"
                     r"|her|their|our|a|an|the|it|that|which)\b|n't\b")
# The user's words for a pet, in the languages the rules read (the fact itself is in English).
_PET_WORDS = {"dog": "dog|puppy|cão|cao|cachorro|perro|perra|hund|chien|chienne",
              "cat": "cat|kitten|kitty|gato|gata|katze|kater|chat|chatte",
              "car": "car|carro|coche|auto|voiture", "bike": "bike|bicycle"}
_PETS = wordset("""
pet dog puppy pup cat kitten kitty hamster rabbit bunny parrot bird budgie canary fish goldfish horse pony turtle
tortoise ferret snake lizard gecko pig rat mouse chinchilla
""")
# Named things the user owns that can be sold or given away as a pet can ("I sold my car").
_OWNED = wordset("car bike bicycle motorbike motorcycle scooter boat van truck camper caravan")


def _ended(text: str, names: list[str], kinds: list[str]) -> bool:
    """Whether ``text`` says the pet called one of ``names``, or the user's pet of one of ``kinds``, is gone."""
    said = [rf"(?<![\w-]){re.escape(name)}" for name in names]
    said += [_OURS + rf"(?:{_PET_WORDS.get(kind, re.escape(kind))})" for kind in kinds]
    for sentence in re.split(r"(?<=[.!?;])\s+", text):
        if _NOT_REAL.search(sentence) or SUPPOSING.match(sentence):
            continue
        for pet in said:
            for found in re.finditer(rf"{pet}\b(?!')(?P<gap>[^.!?;]{{0,40}}?)\b{_ENDED_AFTER}\b", sentence):
                if not _UNDONE.search(found.group("gap")):
                    return True
            for found in re.finditer(rf"\b{_ENDED_BEFORE}\s+(?P<gap>(?:\w+\s+){{0,2}}?){pet}{_THE_THING_ITSELF}",
                                     sentence):
                if not _NOT_DONE.search(sentence[:found.start()]) and not _TO_SOMEONE.search(found.group("gap")):
                    return True
    return False


def _gone(text: str, names: list[str], kinds: list[str]) -> bool:
    """Whether ``text`` says the user no longer has the pet: "I don't have a dog anymore", "I no longer have Rex"."""
    pets = [re.escape(name) for name in names] + [_PET_WORDS.get(kind, re.escape(kind)) for kind in kinds]
    return any(re.search(rf"\b(?:don't|do\s+not|no\s+longer|não|nao|ya\s+no)\s+(?:have|own|tenho|tengo)\s+"
                         rf"(?:(?:a|an|my|our|the|um|uma|un|una)\s+)?(?:{pet})(?:\s+(?:anymore|any\s+more|now|mais))?"
                         r"\s*(?:[.,;!]|$)", text) for pet in pets)


def _pet_words(fact: Fact) -> tuple[list[str], list[str]]:
    """A pet's name and what it is: ``(["rex"], ["dog"])``; nothing for any other fact."""
    if fact.kind == "pet":
        said = fact.said or fact.subject
        named = re.search(r"\b(?:called|named)\s+(.+)$", said, re.IGNORECASE)
        name = named.group(1) if named else " ".join(w for w in said.split() if w[:1].isupper())
        kinds = [w for w in _words(said) if w in _PETS]
        return ([name.casefold().strip()] if name.strip() else []), kinds
    thing = fact.kind[:-5].replace("_", " ") if fact.kind.endswith(".name") and fact.kind.count(".") == 1 else ""
    name = (fact.said or fact.subject).casefold().strip()
    # The last word says what it is: "guinea pig", "sports car".
    return ([name] if name else [], [thing]) if thing.split()[-1:] and thing.split()[-1] in _PETS | _OWNED else ([], [])


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.casefold()) if len(w) >= 3 and w not in STOP_WORDS]


def _negation(fact: Fact) -> Fact:
    value = fact.said or fact.subject
    if fact.kind.endswith(".name"):
        thing = fact.kind[:-5].replace("_", " ")
        return model_fact(fact.kind, value, True, f"User no longer has a {thing} called {value}")
    return model_fact(fact.kind, value, True, statement(fact.kind, value, True))


def withdraw_denied(state: Mapping[str, Any], user: str, sid: str, now: float | None = None) -> dict[str, Any]:
    """``state`` with every stored fact the utterance denies turned into its negation (old one in
    history): "I don't like jazz anymore", and for a pet or a named thing, "I don't have a dog
    anymore" or "Rex died"."""
    text = normalise(user).casefold()
    may_deny, may_end = bool(_MAY_DENY.search(text)), bool(_MAY_END.search(text))
    if not may_deny and not may_end:
        return dict(state)  # most turns deny nothing: no scan of every stored fact
    denials = []
    for stored in state.get("facts") or []:
        fact = fact_of(state, str(stored))
        if fact.negated:
            continue
        names, kinds = _pet_words(fact)
        words = _words(fact.subject) if fact.kind in _DENIABLE and fact.kind != "pet" else []
        if ((may_deny and (any(_denies(text, w) for w in words) or _gone(text, names, kinds)))
                or (may_end and _ended(text, names, kinds))):
            denials.append(_negation(fact))
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
