"""Recalled hits under a token budget: long exchanges are cut to their side nearer the query,
the lowest-ranked first, before any hit is left out."""
from __future__ import annotations

from ovos_memory_plugins._core.tokens import estimate_tokens
from ovos_memory_plugins.common import MemoryHit
from ovos_memory_plugins.render import ContextStyle, render_hits

FILLER = " ".join(["we talked about the weather and the traffic on the way home"] * 4)


def exchange(question, answer, source="s_0"):
    return MemoryHit(f"Q: {question}\nA: {answer}", source, 1.0, {"question": question, "answer": answer})


def tokens(chunks):
    return estimate_tokens("\n\n".join(chunks))


def test_everything_that_fits_is_sent_whole():
    hits = [exchange("Where do I work?", "At the hospital."), exchange("My cat?", "Bolacha.")]
    assert render_hits(hits, ContextStyle(), 1000, "cat") == render_hits(hits, ContextStyle())


def test_the_lowest_ranked_exchange_keeps_its_side_nearer_the_query_instead_of_being_dropped():
    best = exchange("What did I plant in the garden?", "Tomatoes and basil, you said.")
    long_user = exchange(f"My sister Lena plays the cello in an orchestra. {FILLER}", f"That is lovely. {FILLER}")
    long_answer = exchange(f"Tell me something. {FILLER}", f"Your sister Lena plays the cello. {FILLER}")
    whole = [render_hits([h], ContextStyle()) for h in (best, long_user, long_answer)]
    budget = tokens(whole) - 20  # one long exchange too many
    sent = render_hits([best, long_user, long_answer], ContextStyle(), budget, "What does Lena play?").split("\n\n")
    assert sent[0] == whole[0], "the best hit is untouched"
    assert sent[1] == whole[1], "cutting the lowest-ranked one was enough"
    assert sent[2] == f"- A: Your sister Lena plays the cello. {FILLER}", "the answer shares the query's words"
    assert estimate_tokens("\n\n".join(sent)) <= budget


def test_on_a_tie_the_users_words_are_kept_and_the_question_stays_on_one_line():
    hit = exchange(f"I live in Porto.\n{FILLER}", f"Porto is lovely. {FILLER}")
    budget = estimate_tokens(render_hits([hit], ContextStyle())) - 10
    assert render_hits([hit], ContextStyle(), budget, "Porto") == f"- Q: I live in Porto. / {FILLER}"


def test_hits_that_are_not_exchanges_are_left_out_as_before_when_nothing_can_be_cut():
    note = MemoryHit(f"A note: {FILLER}", "doc_1")
    short = MemoryHit("Short note.", "doc_2")
    budget = estimate_tokens("- Short note.") + 1
    assert render_hits([note, short], ContextStyle(), budget, "note") == "- Short note."


def test_a_memory_under_max_added_tokens_sends_the_answering_side_of_a_long_exchange(tmp_path):
    from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

    from ovos_memory_plugins.lexical import LexicalMemory

    def said(question, answer):
        return [AgentMessage(MessageRole.USER, question), AgentMessage(MessageRole.ASSISTANT, answer)]

    config = {"db_path": str(tmp_path / "l.db"), "max_added_tokens": 200, "max_history": 1}
    with LexicalMemory(config) as memory:
        for question, answer in [
            ("Which cello strings did Lena buy for the concert?", "Gut strings, for the concert."),
            (f"Lena plays the cello at the concert. {FILLER}", f"Sounds lovely. {FILLER}"),
            (f"Is the concert on Friday? {FILLER}", f"Yes, Lena's cello concert is on Friday. {FILLER}"),
            ("Thanks!", "You're welcome."),  # the window
        ]:
            memory.update_history(said(question, answer), "s")
        assert memory.flush(30)
        added = memory.build_conversation_context("When is Lena's cello concert?", "s")[0].content
    chunks = added.split("\n\n")
    assert any("Gut strings" in c for c in chunks), "the short best hit, whole"
    assert f"- A: Yes, Lena's cello concert is on Friday. {FILLER}" in chunks
    assert any(c.startswith("- Q: Lena plays the cello at the concert.") and "Sounds lovely" not in c for c in chunks)


def test_the_best_hit_is_never_cut_to_make_room_for_others_only_when_it_does_not_fit_alone():
    best = exchange(f"Lena plays the cello. {FILLER}", f"Lovely. {FILLER}")
    other = exchange(f"Lena's cello is old. {FILLER}", f"Nice. {FILLER}")
    whole = render_hits([best], ContextStyle())
    assert render_hits([best, other], ContextStyle(), estimate_tokens(whole) + 5, "Lena cello") == whole
    alone = render_hits([best], ContextStyle(), estimate_tokens(whole) - 5, "Lena cello")
    assert alone == f"- Q: Lena plays the cello. {FILLER}"
