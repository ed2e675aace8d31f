"""The shared chat client against a real HTTP server on 127.0.0.1 (FakeLLMServer), and,
opt-in (marker ``llm``), against a real local model at ``OVOS_MEMORY_TEST_LLM_URL``."""
from __future__ import annotations

import threading
import time

import pytest

from ovos_memory_plugins._core import log as _log
from ovos_memory_plugins._llm import client as client_module
from ovos_memory_plugins._llm.client import (
    ChatClient,
    _Breaker,
    _first_model,
    chat_complete,
    resolve_model,
    strip_think,
)
from ovos_memory_plugins.errors import LLMContextOverflow, LLMError, LLMTimeout, LLMUnavailable
from ovos_memory_plugins.testing.llm import FakeLLMServer, closed_port_url
from tests._timing import patience

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def llm():
    with FakeLLMServer() as server:
        yield server


class RecordingLog:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level):
        return lambda msg, *a: self.lines.append((level, msg))


@pytest.fixture
def log_lines(monkeypatch):
    recorder = RecordingLog()
    monkeypatch.setattr(_log, "LOG", recorder)
    monkeypatch.setattr("ovos_memory_plugins._llm.client.LOG", recorder)
    return recorder.lines


# -- talking to a healthy server ------------------------------------------------------------
def test_complete_returns_the_reply_with_reasoning_blocks_stripped(llm):
    llm.add_replies("<think>let me think</think>\n Hello there ")
    assert ChatClient(llm.url).complete(HI) == "Hello there"


def test_the_model_is_discovered_once_from_models_and_sent_with_each_request(llm):
    client = ChatClient(llm.url)
    client.complete(HI)
    client.complete(HI)
    assert llm.count("/models") == 1
    assert [r.body["model"] for r in llm.chat_requests()] == ["fake-model", "fake-model"]
    assert client.resolve_model() == "fake-model"


def test_a_configured_model_skips_discovery(llm):
    ChatClient(llm.url, model="mine").complete(HI)
    assert llm.count("/models") == 0
    assert llm.chat_requests()[0].body["model"] == "mine"


def test_a_server_without_a_model_listing_still_gets_completions_without_a_model(llm):
    llm.model = None  # /v1/models answers 404
    client = ChatClient(llm.url)
    assert client.complete(HI) == "OK"
    assert "model" not in llm.chat_requests()[0].body
    client.complete(HI)
    assert llm.count("/models") == 1, "a missing listing is remembered, not asked again"


def test_model_listings_in_openai_and_ollama_shapes_are_understood():
    assert _first_model({"data": [{"id": "qwen2.5-0.5b"}]}) == "qwen2.5-0.5b"
    assert _first_model({"models": [{"name": "llama3.2:1b"}]}) == "llama3.2:1b"
    assert _first_model({"data": []}) == "" and _first_model(["x"]) == ""


def test_the_request_carries_messages_max_tokens_and_the_api_key(llm):
    ChatClient(llm.url, api_key="sekret").complete(HI, max_tokens=17)
    request = llm.chat_requests()[0]
    assert request.body["messages"] == HI and request.body["max_tokens"] == 17
    assert request.headers.get("Authorization") == "Bearer sekret"


def test_json_mode_sends_response_format_when_the_server_accepts_it(llm):
    client = ChatClient(llm.url)
    client.complete(HI, json_mode=True)
    client.complete(HI, json_mode=True)
    assert [r.body.get("response_format") for r in llm.chat_requests()] == [{"type": "json_object"}] * 2


def test_json_mode_rejected_with_400_is_dropped_retried_once_and_remembered(llm):
    llm.json_mode = False
    client = ChatClient(llm.url)
    assert client.complete(HI, json_mode=True) == "OK"
    assert client.complete(HI, json_mode=True) == "OK"
    formats = [r.body.get("response_format") for r in llm.chat_requests()]
    assert formats == [{"type": "json_object"}, None, None]
    assert client.available


@pytest.mark.parametrize("text, expected", [
    ("<think>a</think>b", "b"),
    ("x <THINK>\nlong\n</think> y", "x  y"),
    ("reasoning that the template opened</think>answer", "answer"),
    ("answer<think>cut off by max_tokens", "answer"),
    ("plain", "plain"),
])
def test_strip_think_handles_closed_unclosed_and_template_opened_blocks(text, expected):
    assert strip_think(text) == expected


# -- failures -------------------------------------------------------------------------------
def test_a_server_slower_than_the_timeout_raises_llm_timeout(llm):
    llm.mode, llm.delay = "slow", 3.0
    with pytest.raises(LLMTimeout):
        ChatClient(llm.url, model="m", timeout=0.3).complete(HI)


def test_a_server_slower_than_the_timeout_is_asked_again_with_twice_as_long_up_to_four_times(llm, log_lines):
    llm.mode, llm.delay = "slow", 0.8
    client = ChatClient(llm.url, model="m", timeout=0.3)
    assert client.complete(HI) == "OK"  # asked at 0.3 s, 0.6 s, then answered within 1.2 s
    assert len(llm.chat_requests()) == 3 and client.completion_timeout == pytest.approx(1.2)
    assert client.complete(HI) == "OK" and len(llm.chat_requests()) == 4  # the longer time stays
    assert client.timeout == 0.3  # what was configured is still what the config says
    said = [(level, msg) for level, msg in log_lines if "slower than its request_timeout" in msg]
    assert [level for level, _ in said] == ["info", "info"] and "up to 1.2 s" in said[-1][1]
    assert not [msg for level, msg in log_lines if level in ("warning", "error")]  # it answered: nothing failed


def test_a_server_slower_than_four_times_the_timeout_fails_the_request_and_opens_the_circuit(llm):
    llm.mode, llm.delay = "slow", 3.0
    client = ChatClient(llm.url, model="m", timeout=0.3)
    with pytest.raises(LLMTimeout):
        client.complete(HI)
    assert len(llm.chat_requests()) == 3 and not client.available
    client.reset()
    with pytest.raises(LLMTimeout):
        client.complete(HI)
    assert len(llm.chat_requests()) == 4  # at four times already: asked once


def test_a_slow_model_listing_is_not_asked_again(llm):
    llm.mode, llm.delay = "slow", 3.0
    client = ChatClient(llm.url, timeout=0.3)  # no model: /models is asked first
    with pytest.raises(LLMTimeout):
        client.complete(HI)
    assert (llm.count("/models"), llm.count("/chat/completions")) == (1, 0)
    assert client.completion_timeout == 0.3


def test_the_model_listing_waits_as_long_as_the_request_timeout_says(llm, monkeypatch):
    # A one-slot local server busy with the persona's chat answers the lookup late; a fixed
    # shorter limit failed a memory whose request_timeout allowed for it.
    monkeypatch.setattr(client_module, "MODELS_TIMEOUT_S", 0.2)
    llm.mode, llm.delay = "slow", 0.6
    assert ChatClient(llm.url, timeout=patience(5)).complete(HI)


def test_a_slow_servers_longer_time_is_for_its_answer_never_for_connecting(llm, monkeypatch):
    import http.client

    llm.mode, llm.delay = "slow", 0.8
    client = ChatClient(llm.url, model="m", timeout=0.3)
    assert client.complete(HI) == "OK" and client.completion_timeout == pytest.approx(1.2)
    connects = []
    real = http.client.socket.create_connection

    def recording(address, timeout, *args, **kwargs):
        sock = real(address, timeout, *args, **kwargs)
        connects.append(timeout)
        return sock

    monkeypatch.setattr(http.client.socket, "create_connection", recording)
    assert client.complete(HI) == "OK"  # 0.8 s: within the longer time
    # A host that black-holes the connection would cost the configured 0.3 s, not 1.2 s.
    assert connects == [0.3]


def test_a_server_that_cannot_be_reached_never_gets_longer():
    client = ChatClient(closed_port_url(), model="m", timeout=0.3)
    with pytest.raises(LLMUnavailable):
        client.complete(HI)
    assert client.completion_timeout == 0.3


def test_a_server_trickling_its_answer_is_cut_at_the_timeout_for_the_whole_request(llm):
    llm.mode, llm.delay = "trickle", 0.05  # each read gets a byte well within the timeout
    client = ChatClient(llm.url, model="m", timeout=0.5)
    with pytest.raises(LLMTimeout, match="no whole answer within 2s"):  # 0.5, 1 and 2 s; not the answer 12 s later
        client.complete(HI)
    llm.mode = "ok"
    client.reset()
    assert client.complete(HI) == "OK"  # the next request is not cut by the old deadline


@pytest.mark.parametrize("mode", ["error", "malformed", "garbage", "bad_shape"])
def test_a_broken_server_raises_llm_error(llm, mode):
    llm.mode = mode
    with pytest.raises(LLMError) as info:
        ChatClient(llm.url, model="m").complete(HI)
    assert not isinstance(info.value, (LLMTimeout, LLMUnavailable))


def test_a_refused_connection_raises_llm_unavailable():
    client = ChatClient(closed_port_url())
    with pytest.raises(LLMUnavailable):
        client.complete(HI)
    assert not client.available


def test_while_the_circuit_is_open_no_request_is_sent(llm):
    llm.mode = "error"
    client = ChatClient(llm.url, model="m")
    with pytest.raises(LLMError):
        client.complete(HI)
    llm.mode = "ok"  # healthy again, but the back-off period (5 s) has not passed
    for _ in range(20):
        with pytest.raises(LLMUnavailable):
            client.complete(HI)
    assert llm.count() == 1
    assert not client.available and client.retry_in > 0


def test_a_fake_server_started_closed_listens_once_another_mode_is_set():
    with FakeLLMServer(mode="closed") as server:
        client = ChatClient(server.url, model="m", backoff=(0.0, 0.0))
        with pytest.raises(LLMUnavailable):
            client.complete(HI)
        server.mode = "ok"
        assert client.complete(HI) == "OK"


def test_a_dead_endpoint_costs_one_attempt_per_back_off_period():
    client = ChatClient(closed_port_url(), backoff=(0.3, 0.3))
    for _ in range(50):
        with pytest.raises(LLMUnavailable):
            client.complete(HI)
    assert client.attempts == 1
    time.sleep(0.35)
    for _ in range(50):
        with pytest.raises(LLMUnavailable):
            client.complete(HI)
    assert client.attempts == 2


def test_the_back_off_doubles_up_to_its_maximum():
    breaker = _Breaker(5.0, 60.0)
    assert [breaker.failure() for _ in range(6)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    breaker.success()
    assert breaker.failure() == 5.0


def test_a_request_that_cannot_be_encoded_raises_without_opening_the_circuit(llm):
    client = ChatClient(llm.url, model="m")
    with pytest.raises(TypeError):
        client.complete([{"role": "user", "content": object()}])
    assert client.available
    assert client.complete(HI) == "OK"


def test_the_client_recovers_when_the_server_comes_back(llm):
    client = ChatClient(llm.url, model="m", backoff=(0.05, 0.05))
    llm.mode = "closed"
    with pytest.raises(LLMUnavailable):
        client.complete(HI)
    llm.mode = "ok"  # listening again on the same port
    time.sleep(0.1)
    assert client.available
    assert client.complete(HI) == "OK"
    assert client.available and client.retry_in == 0


def test_only_one_trial_request_goes_out_when_many_threads_call_a_recovering_endpoint(llm):
    llm.mode, llm.delay = "slow", 0.5
    client = ChatClient(llm.url, model="m", backoff=(0.0, 0.0))
    client._breaker.failure()  # failing, period over: the next caller is the single trial
    outcomes: list[str] = []

    def call():
        try:
            outcomes.append(client.complete(HI))
        except LLMUnavailable:
            outcomes.append("refused")

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert llm.count("/chat/completions") == 1
    assert sorted(outcomes) == ["OK"] + ["refused"] * 7


def test_a_failing_endpoint_is_logged_once_and_its_recovery_once(llm, log_lines):
    llm.mode = "error"
    client = ChatClient(llm.url, model="m", backoff=(0.0, 0.0))
    for _ in range(5):
        with pytest.raises(LLMError):
            client.complete(HI)
    assert llm.count() == 5, "with no back-off every call is an attempt"
    assert [level for level, _ in log_lines] == ["warning"]
    llm.mode = "ok"
    client.complete(HI)
    client.complete(HI)
    assert [level for level, _ in log_lines] == ["warning", "info"]
    assert "recovered" in log_lines[-1][1]


def test_replies_with_no_text_are_logged_once_naming_the_cut_and_their_end_once(llm, log_lines):
    llm.finish_reason = "length"
    # The thoughts that took every token are asked again at once, told not to think (a 4th request).
    llm.add_replies("", "<think>all of max_tokens spent thinking</think>", "", "")
    client = ChatClient(llm.url, model="m")
    assert [client.complete(HI) for _ in range(3)] == ["", "", ""]
    assert llm.count("/chat/completions") == 4
    assert [level for level, _ in log_lines] == ["warning", "info"]
    assert "no text" in log_lines[0][1] and "max tokens" in log_lines[0][1]
    assert "reasons before it answers" in log_lines[1][1]
    llm.finish_reason = "stop"
    assert client.complete(HI) == "OK"
    client.complete(HI)
    assert [level for level, _ in log_lines] == ["warning", "info", "info"]


def test_requests_that_keep_exceeding_the_context_are_said_once(llm, log_lines):
    # The first overflow teaches the client the context; every request after it still too long
    # was answered without the model, and nothing said so.
    llm.context = 40
    client = ChatClient(llm.url, model="m")
    long = [{"role": "user", "content": "tell me about " + "the sea and the sky " * 40}]
    for _ in range(4):
        with pytest.raises(LLMContextOverflow):
            client.complete(long, max_tokens=8)
    warned = [line for level, line in log_lines if level == "warning"]
    assert len(warned) == 1 and "keep exceeding the model's context (40 tokens)" in warned[0]
    assert "-c 4096" in warned[0]


# -- the reference module's functions ----------------------------------------------------------
def test_reference_functions_resolve_the_model_and_complete(llm):
    assert resolve_model(llm.url) == "fake-model"
    assert chat_complete(llm.url, "", HI, max_tokens=8) == "OK"


def test_resolve_model_never_raises_on_a_dead_endpoint():
    assert resolve_model(closed_port_url()) == ""
    assert ChatClient(closed_port_url()).resolve_model() == ""


# -- opt-in: a real local model ---------------------------------------------------------------


@pytest.mark.llm
@pytest.mark.timeout(1200)  # a small model on a busy CPU: minutes
def test_a_real_model_is_discovered_and_answers(real_llm_url):
    client = ChatClient(real_llm_url, timeout=120)
    assert client.resolve_model() != "" or client.complete(HI, max_tokens=8) is not None
    text = client.complete([{"role": "user", "content": "Reply with the single word: pong"}], max_tokens=16)
    assert isinstance(text, str) and "<think>" not in text


@pytest.mark.llm
@pytest.mark.timeout(1200)  # a small model on a busy CPU: minutes
def test_a_real_model_answers_in_json_mode_or_without_it(real_llm_url):
    client = ChatClient(real_llm_url, timeout=120)
    text = client.complete([{"role": "user", "content": 'Return a JSON object {"ok": true}.'}], max_tokens=32,
                           json_mode=True)
    assert isinstance(text, str)


@pytest.mark.parametrize("url", [None, "", "   "])
def test_no_endpoint_is_unavailable_without_a_request_or_an_error(url):
    client = ChatClient(url)
    assert client.available is False and client.resolve_model() == ""
    with pytest.raises(LLMUnavailable, match="no LLM endpoint"):
        client.complete([{"role": "user", "content": "hi"}])
    assert client.attempts == 0


def test_an_endpoint_that_is_not_a_url_fails_as_an_llm_error():
    with pytest.raises(LLMError, match="/v1/chat/completions"):
        ChatClient("/v1", model="m").complete([{"role": "user", "content": "hi"}])
