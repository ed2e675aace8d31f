"""RedisMemory's compaction with a model: prompts within the context after a burst, bad summaries
not committed, facts kept across folds. A real redis-server; the model is a FakeLLMServer
reproducing what a weak model answered, or, opt-in (marker ``llm``), the real local model."""
from __future__ import annotations

import uuid

import pytest
import redis

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._core.tokens import estimate_messages
from ovos_memory_plugins.redis_memory import RedisMemory
from ovos_memory_plugins.testing.llm import FakeLLMServer
from tests._fake_model import is_narrative, memory_model
from tests._redis import redis_server_url  # noqa: F401 - a fixture
from tests._timing import patience

pytestmark = pytest.mark.redis
U, A = MessageRole.USER, MessageRole.ASSISTANT
GREETING = "Hi Marta, I'm here to help you with your new conversation. What's your name?"
TURNS = [
    ("Hi there! I'm Marta, by the way.", "Hello Marta! I'm Nova, your assistant."),
    ("I live in Lisbon, near the river.", "Lisbon is beautiful! It has over 500,000 people."),
    ("I work as a nurse at Santa Maria hospital.", "Santa Maria is the largest hospital in Portugal."),
    ("I have a cat called Bolacha.", "How cute! I've always wanted a dog named Max."),
    ("Big news: I moved from Lisbon to Porto last week.", "Porto is famous for port wine."),
]
FACTS = {
    "Hi there! I'm Marta, by the way.": [("name", "Marta")],
    "I live in Lisbon, near the river.": [("home_city", "Lisbon")],
    "I work as a nurse at Santa Maria hospital.": [("job", "nurse"), ("workplace", "Santa Maria hospital")],
    "I have a cat called Bolacha.": [("pet", "cat called Bolacha")],
    "Big news: I moved from Lisbon to Porto last week.": [("home_city", "Porto")],
}


@pytest.fixture
def make(redis_server_url, closing):  # noqa: F811
    prefixes = []

    def build(**overrides):
        prefixes.append(f"test:{uuid.uuid4().hex[:12]}")
        return closing(RedisMemory({"url": redis_server_url, "prefix": prefixes[-1], **overrides}))

    yield build
    client = redis.Redis.from_url(redis_server_url, decode_responses=True)
    for prefix in prefixes:
        keys = list(client.scan_iter(match=prefix + ":*"))
        if keys:
            client.delete(*keys)
    client.close()


def say(memory, turns, sid="s"):
    for user, assistant in turns:
        memory.update_history([AgentMessage(U, user), AgentMessage(A, assistant)], sid)


def test_a_burst_of_750_exchanges_never_sends_a_prompt_longer_than_the_context(make):
    # A 4,096-token model behind a server that answers HTTP 400 to anything longer; the memory is
    # not told its size: it must not need to be.
    filler = [(f"I walked to the market on day {i} and bought some apples and a loaf of bread.",
               f"Lovely! Day {i} sounds like a good day for a walk, and fresh bread is always nice.")
              for i in range(745)]
    with FakeLLMServer(reply=memory_model(FACTS), context=4096) as llm:
        memory = make(api_url=llm.url, compact_token_threshold=4000, keep_recent=2)
        say(memory, TURNS[:4] + filler[:300] + TURNS[4:] + filler[300:])
        assert memory.flush(patience(120))
        requests = llm.chat_requests()
        assert requests and all(estimate_messages(r.messages) + r.body["max_tokens"] <= 4096 for r in requests)
        assert memory.degraded() == {}, "no request failed"
        summary, window = memory.load("s")
        assert "User lives in Porto" in summary and "User lives in Lisbon" not in summary
        assert "User's name is Marta" in summary and len(window) < 150


def test_a_greeting_from_the_model_is_not_committed_and_the_turns_stay(make):
    with FakeLLMServer(reply=memory_model(FACTS, narrative=GREETING)) as llm:
        memory = make(api_url=llm.url, compact_threshold=4, compact_token_threshold=0, keep_recent=1)
        say(memory, TURNS)
        assert memory.flush(patience(20))
        summary, window = memory.load("s")
        assert summary == "" and len(window) == 5, "nothing folded: the turns are still there"
        assert any(is_narrative(r.messages) for r in llm.chat_requests())
        assert "greeting" in memory.degraded()["ovos-memory-plugin-redis:summary"]
        # What the model wrote, and so the conversation it quoted, is not in what degraded() says;
        # a forget of the session takes the session's id out of it too.
        assert "help you" not in str(memory.degraded()) and "I'm here" not in str(memory.degraded())
        memory.forget("s")
        assert "ovos-memory-plugin-redis:summary" not in memory.degraded()


def test_a_model_summary_keeps_the_facts_and_the_change(make):
    narrative = "Marta talked about her cat Bolacha and her move to Porto."
    with FakeLLMServer(reply=memory_model(FACTS, narrative=narrative)) as llm:
        memory = make(api_url=llm.url, compact_threshold=3, compact_token_threshold=0, keep_recent=1)
        say(memory, TURNS[:3])
        memory.flush(patience(20))
        say(memory, TURNS[3:] + [("Thanks!", "You're welcome!")])
        assert memory.flush(patience(20))
        summary = memory.load("s")[0]
        assert summary.startswith("Facts about the user:\n- User's name is Marta\n")
        for fact in ("User works as a nurse", "User works at Santa Maria hospital", "User's pet: cat called Bolacha",
                     "User lives in Porto", narrative):
            assert fact in summary
        assert "Lisbon" not in summary and "Nova" not in summary and "Max" not in summary


COUSINS = [("Maria", "Lisbon"), ("Pedro", "Porto"), ("Sofia", "Madrid"), ("Lukas", "Berlin"), ("Amara", "Lagos"),
           ("Kenji", "Osaka"), ("Ingrid", "Oslo"), ("Rafael", "Seville")]


@pytest.mark.parametrize("narrative, why", [
    ("asdkj qwe zxc 123 ### \x00 {{{", "control characters"),
    ("The user said their name is Bob and they live in Tokyo.", "names what the turns it summarises do not"),
    ("asdkj qwe zxc 123 ### {{{", None),  # kept, as the reference kept any text: it covers none of the turns
])
def test_a_junk_or_invented_summary_loses_nothing_the_user_said(make, narrative, why):
    # A server answering 200 with junk, or a model inventing what the user said: the turns it
    # folds must stay in the list or be said in the summary, never vanish, and nothing invented is kept.
    with FakeLLMServer(reply=memory_model(narrative=narrative)) as llm:
        memory = make(api_url=llm.url, compact_token_threshold=120, request_timeout=5)
        for name, city in COUSINS:
            say(memory, [(f"My cousin {name} moved to {city} last year.", f"Nice, {name} in {city}.")])
            memory.flush(patience(20))
        summary, window = memory.load("s")
        kept = summary + " ".join(e.user for e in window)
        assert [name for name, _ in COUSINS if name not in kept] == []
        assert "Bob" not in summary and "\x00" not in summary
        if why:
            assert why in memory.degraded()["ovos-memory-plugin-redis:summary"]
            assert "asdkj" not in summary


@pytest.mark.parametrize("secret", ["My wifi password is Bolacha2024.", "The wifi key is Bolacha2024.",
                                    "The gate opens with 2024.", "I use the same secret everywhere, it's Bolacha2024.",
                                    "My bank login is Bolacha2024."])
def test_a_secret_said_in_passing_stays_out_of_the_compacted_summary(make, secret):
    memory = make(api_url=None, compact_threshold=3, compact_token_threshold=0, keep_recent=1)
    value = secret.rstrip(".").split()[-1]
    say(memory, [(f"I'm Marta. {secret}", f"Noted: {value}."), *TURNS[1:3], ("Thanks!", "You're welcome!")])
    assert memory.flush(patience(20))
    summary = memory.load("s")[0]
    assert "Marta" in summary and value not in summary, summary


def test_a_session_forgotten_during_its_compaction_is_sent_to_the_model_no_more(make, caplog):
    import time

    with FakeLLMServer(reply=memory_model(FACTS), mode="slow", delay=1.0) as llm:
        memory = make(api_url=llm.url, model="m", compact_threshold=3, compact_token_threshold=0, keep_recent=1)
        say(memory, TURNS[:4])
        while llm.count("/chat/completions") == 0:  # the compaction waits on the model
            time.sleep(0.01)
        memory.forget("s")
        asked = llm.count("/chat/completions")
        llm.mode = "ok"
        assert memory.flush(patience(20))
        assert llm.count("/chat/completions") == asked, "the forgotten turns went on to the model"
        assert memory.load("s") == ("", []) and "lease" not in caplog.text


def test_a_session_another_process_forgets_during_its_compaction_stops_going_to_the_model(make, caplog):
    import time

    with FakeLLMServer(reply=memory_model(FACTS), mode="slow", delay=1.0) as llm:
        compacting = make(api_url=llm.url, model="m", compact_threshold=3, compact_token_threshold=0, keep_recent=1,
                          lock_timeout=1.5)
        other = RedisMemory({"url": compacting.settings.url, "prefix": compacting.settings.prefix, "api_url": None})
        try:
            say(compacting, TURNS[:4])
            while llm.count("/chat/completions") == 0:  # the compaction waits on the model
                time.sleep(0.01)
            other.forget("s")  # another process: the lease goes with the session's keys
            asked = llm.count("/chat/completions")
            assert compacting.flush(patience(30))
            # The request under way ends; the lost lease stops the fold before the next one.
            assert llm.count("/chat/completions") <= asked + 1, "the forgotten turns went on to the model"
            assert other.load("s") == ("", []) and "lost the compaction lease" not in caplog.text
        finally:
            other.close()


@pytest.mark.llm
@pytest.mark.timeout(1200)  # a small model on a busy CPU: minutes
def test_a_real_model_compacts_and_the_summary_names_the_users_current_city(make, real_llm_url):
    memory = make(api_url=real_llm_url, compact_threshold=5, compact_token_threshold=0, keep_recent=1)
    say(memory, TURNS + [("Thanks, that's helpful.", "Anytime!")])
    assert memory.flush(600)
    summary, window = memory.load("s")
    assert len(window) == 1 and "User lives in Porto" in summary and "User lives in Lisbon" not in summary
    assert "Marta" in summary and memory.degraded() == {}
    assert memory._client.attempts > 0 and "Conversation so far: User:" not in summary, "the model wrote it"
