"""Recall that agrees with what is current: the day a recalled exchange was said, the exchanges
the current facts contradict, and the facts a turn sends."""
from __future__ import annotations

import time

from ovos_memory_plugins._index.current import contradicts, facts_stated, put_contradicted_last
from ovos_memory_plugins._llm.facts.choice import choose_facts, is_core_fact
from ovos_memory_plugins.common import MemoryHit
from ovos_memory_plugins.render import ContextStyle, render_hits

DAY = 86400.0


def exchange(question, answer="ok", ts=None):
    meta = {"question": question, "answer": answer, **({"ts": ts} if ts is not None else {})}
    return MemoryHit(f"Q: {question}\nA: {answer}", "s_0", 1.0, meta)


def test_a_hit_from_an_earlier_day_shows_that_day_and_todays_show_none():
    old = exchange("I live in Lyon.", ts=time.mktime((2023, 5, 8, 12, 0, 0, 0, 0, -1)))
    today = exchange("I moved to Bordeaux.", ts=time.time())
    undated = exchange("Hello")
    shown = render_hits([old, today, undated], ContextStyle(show_dates="older")).split("\n\n")
    assert shown == ["- (8 May 2023) Q: I live in Lyon.\nA: ok", "- Q: I moved to Bordeaux.\nA: ok",
                     "- Q: Hello\nA: ok"]
    assert render_hits([old], ContextStyle()) == "- Q: I live in Lyon.\nA: ok", "never: the reference's shape"
    sourced = render_hits([old], ContextStyle(include_sources=True, show_dates="older"))
    assert sourced == "- [s_0] (8 May 2023) Q: I live in Lyon.\nA: ok"


def test_an_exchange_stating_another_value_than_the_facts_goes_last():
    facts = facts_stated(["Known facts about the user:\n- User lives in Bordeaux\n- User's name is Ana"])
    assert facts == {"User lives in Bordeaux", "User's name is Ana"}
    assert contradicts("I live in Lyon.", facts) and contradicts("My name is Bea.", facts)
    assert not contradicts("I live in Bordeaux now.", facts) and not contradicts("I love jazz.", facts)
    assert not contradicts("I work as a nurse.", facts), "no fact about the job: nothing to contradict"
    hits = [exchange("I live in Lyon."), exchange("I love the river."), exchange("My name is Ana.")]
    blocks = ["Known facts about the user:\n- User lives in Bordeaux"]
    assert [h.metadata["question"] for h in put_contradicted_last(hits, blocks)] == [
        "I love the river.", "My name is Ana.", "I live in Lyon."]
    assert put_contradicted_last(hits, []) == hits, "no facts: the order stays"


def test_the_assistants_own_old_claim_about_the_user_is_not_evidence_over_the_facts():
    wrong = exchange("Where do I live?", "You live in Lyon, if I remember well.")
    right = exchange("Where do I live?", "You live in Bordeaux.")
    other = exchange("Any river nearby?", "The Garonne.")
    blocks = ["Known facts about the user:\n- User lives in Bordeaux"]
    assert put_contradicted_last([wrong, right, other], blocks) == [right, other, wrong]
    unanswered = MemoryHit("Q: Where do I live?", "s_3", 1.0, {})
    assert put_contradicted_last([unanswered, other], blocks) == [unanswered, other]


def test_the_core_facts_are_always_sent_and_the_others_on_merit():
    facts = ["User likes jazz", "User lives in Porto", "User's pet: dog called Biscuit", "User's name is Maya",
             "User likes hiking", "User's home city: Braga"]
    assert [is_core_fact(f) for f in facts] == [False, True, False, True, False, True]
    assert choose_facts(facts, "", 5) == ["User lives in Porto", "User's name is Maya", "User's home city: Braga"]
    assert choose_facts(facts, "What's my dog called?", 5) == [
        "User lives in Porto", "User's pet: dog called Biscuit", "User's name is Maya", "User's home city: Braga"]
    assert "User likes hiking" not in choose_facts(facts, "Do I like jazz?", 1), "the limit keeps the best"
    assert "User likes jazz" in choose_facts(facts, "Do I like jazz?", 1)
    # "son" is a Spanish stop word, and this question is English: it names the fact.
    assert "User's son is Tom" in choose_facts([*facts, "User's son is Tom"], "How old is my son?", 1)
    core = ["User lives in Porto", "User's name is Maya", "User's home city: Braga"]
    assert choose_facts([*facts, "User works in a hospital"], "set a timer", 5) == core  # no "a" in common
