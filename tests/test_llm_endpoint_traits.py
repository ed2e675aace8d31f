"""What the chat client learns about an endpoint: the structured output it honours, its context
size, its tokenizer. Each server kind is a FakeLLMServer behaving as that server does; opt-in
(marker ``llm``), the same against the real local model."""
from __future__ import annotations

import json

import pytest

from ovos_memory_plugins._core.tokens import estimate_messages
from ovos_memory_plugins._llm.client import ChatClient
from ovos_memory_plugins._llm.traits import DEFAULT_CONTEXT, is_rejection, overflow_limit
from ovos_memory_plugins.errors import LLMContextOverflow, LLMError
from ovos_memory_plugins.testing.llm import FakeLLMServer

SCHEMA = {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]}
ASK = [{"role": "user", "content": "facts please"}]


def formats(server):
    return [(r.body or {}).get("response_format") for r in server.chat_requests()]


def test_an_openai_like_server_gets_a_json_schema_and_keeps_it():
    with FakeLLMServer(reply='{"facts": []}', structured="openai") as server:
        client = ChatClient(server.url)
        for _ in range(3):
            assert client.chat(ASK, schema=SCHEMA).text == '{"facts": []}'
        assert [f["type"] for f in formats(server)] == ["json_schema"] * 3
        assert formats(server)[0]["json_schema"]["schema"] == SCHEMA
        assert client.traits.confirmed


def test_llama_cpp_python_refuses_json_schema_with_a_500_which_is_not_an_outage():
    with FakeLLMServer(reply='{"facts": []}', structured="llama-cpp-python") as server:
        client = ChatClient(server.url)
        assert client.chat(ASK, schema=SCHEMA).text == '{"facts": []}'
        assert client.available and client.problem is None, "a refused format must not open the breaker"
        client.chat(ASK, schema=SCHEMA)
        assert formats(server) == [
            {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA, "strict": True}},
            {"type": "json_object", "schema": SCHEMA},
            {"type": "json_object", "schema": SCHEMA},
        ]


def test_a_model_without_a_system_role_gets_its_instructions_in_the_first_user_message():
    # Gemma's chat template raises on a system message (llama-cpp-python: HTTP 500): learnt once,
    # never an outage, never taken for a refused response_format.
    asked = [{"role": "system", "content": "Extract facts."}, {"role": "user", "content": "I live in Lyon."},
             {"role": "assistant", "content": "[]"}, {"role": "user", "content": "I like jazz."}]
    with FakeLLMServer(reply='{"facts": []}', structured="llama-cpp-python", system_role=False) as server:
        client = ChatClient(server.url)
        assert client.chat(asked, schema=SCHEMA).text == '{"facts": []}'
        assert client.available and client.problem is None
        client.chat(asked, schema=SCHEMA)
        sent = [r.body["messages"] for r in server.chat_requests()]
        merged = [{"role": "user", "content": "Extract facts.\n\nI live in Lyon."}, *asked[2:]]
        assert sent[-2:] == [merged, merged] and len(sent) == 4  # json_schema, then its refusal's retry
        assert client.traits.mode == "json_object+schema"  # the system role was not blamed on the format
    assert asked[0]["role"] == "system"  # the caller's messages are not changed


def test_a_reasoning_model_is_asked_not_to_think_once_it_is_seen_thinking():
    # Qwen3 thinks first: at a memory's small max_tokens the thoughts leave no answer. The blank
    # reply is asked again at once, with "/no_think" and room for thoughts it may still have.
    with FakeLLMServer(reply="User likes jazz", thinks=True) as server:
        client = ChatClient(server.url)
        assert client.complete(ASK, max_tokens=64) == "User likes jazz"
        assert client.complete(ASK, max_tokens=64) == "User likes jazz"
        sent = [(r.body["max_tokens"], r.body["messages"][-1]["content"]) for r in server.chat_requests()]
        assert sent == [(64, "facts please"), (64 + 256, "facts please\n/no_think"),
                        (64 + 256, "facts please\n/no_think")]
        assert client.available and ASK[0]["content"] == "facts please"


def test_a_roles_error_the_system_message_did_not_cause_is_not_learnt():
    # Two user messages in a row fail with or without the system message: the model keeps its
    # system role, and the first error is the one raised.
    asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a"},
             {"role": "user", "content": "b"}]
    with FakeLLMServer(system_role=False) as server:
        client = ChatClient(server.url, backoff=(0.0, 0.0))
        with pytest.raises(LLMError, match="System role not supported"):
            client.complete(asked)
        assert client.traits.system_role is True and server.count("/chat/completions") == 2


def test_the_system_text_opens_the_first_user_message_or_comes_before_the_first_reply():
    from ovos_memory_plugins._llm.traits import without_system_role

    parts = [{"type": "text", "text": "hi"}]
    assert without_system_role([{"role": "system", "content": "S"}, {"role": "user", "content": parts}]) == [
        {"role": "user", "content": [{"type": "text", "text": "S"}, *parts]}]
    assert without_system_role([{"role": "system", "content": "S"}, {"role": "assistant", "content": "a"},
                                {"role": "user", "content": "u"}]) == [
        {"role": "user", "content": "S"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]


def test_room_for_thoughts_the_context_cannot_hold_is_not_asked_for():
    long_ask = [{"role": "user", "content": "word " * 300}]
    with FakeLLMServer(reply="answer", thinks=True, context=700) as server:
        client = ChatClient(server.url)  # the context is not told: 2,048 is assumed
        assert client.complete(long_ask, max_tokens=128) == "answer"
        assert [r.body["max_tokens"] for r in server.chat_requests()] == [128, 384, 128]


def test_a_persons_own_chat_is_sent_as_written_to_a_model_seen_reasoning():
    with FakeLLMServer(reply="answer", thinks=True) as server:
        ChatClient(server.url).complete(ASK, max_tokens=64)  # memory work finds out it reasons
        server.reset_log()
        person = ChatClient(server.url, think_less=False)
        person.complete(ASK, max_tokens=64)
        assert [(r.body["max_tokens"], r.body["messages"]) for r in server.chat_requests()] == [(64, ASK)]


@pytest.mark.parametrize("message, thinks", [
    ({"content": "x", "reasoning_content": "Let me see."}, True),  # llama.cpp's and vLLM's parsers
    ({"content": "<think>\nhmm\n</think>answer"}, True),
    ({"content": "hmm, the template opened it\n</think>\n\nanswer"}, True),
    ({"content": "<think>\n\n</think>\n\nanswer"}, False),  # told not to think: an empty block
    ({"content": "plain answer"}, False),
    ({"content": "The user asked what the <think> tag in Qwen's output means."}, False),  # a mention
    ({"content": "a stray </think> here"}, False),
])
def test_thoughts_are_told_from_an_empty_think_block(message, thinks):
    from ovos_memory_plugins._llm.client import _completion

    assert _completion({"choices": [{"message": message, "finish_reason": "stop"}]}).reasoned is thinks


def test_the_mode_found_is_shared_by_every_client_of_the_endpoint():
    with FakeLLMServer(reply='{"facts": []}', structured="llama-cpp-python") as server:
        ChatClient(server.url).chat(ASK, schema=SCHEMA)
        server.reset_log()
        ChatClient(server.url, timeout=5).chat(ASK, schema=SCHEMA)
        assert formats(server) == [{"type": "json_object", "schema": SCHEMA}]


def test_a_server_refusing_every_format_gets_the_request_without_one():
    with FakeLLMServer(reply='{"facts": []}', structured="none") as server:
        client = ChatClient(server.url)
        client.chat(ASK, schema=SCHEMA)
        client.chat(ASK, schema=SCHEMA)
        assert formats(server)[-2:] == [None, None] and client.available


def test_a_server_that_silently_ignores_the_schema_is_found_out_after_two_replies():
    with FakeLLMServer(reply="Sure! Here are the facts: none.", structured="ignore") as server:
        client = ChatClient(server.url)
        for _ in range(7):
            client.chat(ASK, schema=SCHEMA)
        assert [(f["type"], "schema" in f or "json_schema" in f) if f else None for f in formats(server)] == [
            ("json_schema", True), ("json_schema", True), ("json_object", True), ("json_object", True),
            ("json_object", False), ("json_object", False), None]
        assert client.traits.mode == "none" and client.available


def test_a_confirmed_mode_survives_one_bad_reply():
    with FakeLLMServer(replies=['{"facts": []}', "oops", '{"facts": []}'], structured="openai") as server:
        client = ChatClient(server.url)
        for _ in range(3):
            client.chat(ASK, schema=SCHEMA)
        assert [f["type"] for f in formats(server)] == ["json_schema"] * 3


def test_a_plain_server_error_still_counts_as_a_failure():
    with FakeLLMServer(mode="error") as server:
        client = ChatClient(server.url, model="m")
        with pytest.raises(LLMError):
            client.chat(ASK, schema=SCHEMA)
        assert not client.available and server.count("/chat/completions") == 1


# -- the context -------------------------------------------------------------------------------
def test_a_prompt_longer_than_the_context_raises_overflow_teaches_the_size_and_keeps_the_breaker_closed():
    with FakeLLMServer(context=300) as server:
        client = ChatClient(server.url)
        long = [{"role": "user", "content": "word " * 400}]
        with pytest.raises(LLMContextOverflow) as caught:
            client.complete(long, max_tokens=16)
        assert caught.value.limit == 300
        assert client.context_limit() == 300
        assert client.available and client.complete(ASK, max_tokens=16) == "OK"


def test_the_context_comes_from_the_config_first_then_the_server_then_a_default():
    with FakeLLMServer(props={"default_generation_settings": {"n_ctx": 8192}}) as server:
        assert ChatClient(server.url, max_prompt_tokens=4096).context_limit() == 4096
        client = ChatClient(server.url)
        assert client.context_limit() == DEFAULT_CONTEXT and server.count("/props") == 0, "not asked before it answers"
        client.resolve_model()  # a model listing is not an answer: a server failing completions costs no probe
        assert client.context_limit() == DEFAULT_CONTEXT and server.count("/props") == 0
        client.complete(ASK)
        assert client.context_limit() == 8192 and client.context_limit() == 8192
        assert server.count("/props") == 1
    with FakeLLMServer() as server:  # /props is a 404 here, as on llama-cpp-python
        client = ChatClient(server.url)
        client.complete(ASK)
        assert client.context_limit() == DEFAULT_CONTEXT


def test_fits_counts_the_whole_request_and_the_reply():
    with FakeLLMServer() as server:
        client = ChatClient(server.url, max_prompt_tokens=1000)
        text = [{"role": "user", "content": "Porto " * 300}]
        assert client.fits(text, 100) == (estimate_messages(text) * 1.1 + 100 <= 1000)
        assert client.fits(ASK, 100) and not client.fits(ASK, 990)


def test_the_token_estimate_follows_what_the_server_reports():
    with FakeLLMServer() as server:
        client = ChatClient(server.url)
        before = client.estimate_prompt(ASK)
        client.traits.observe_prompt(100, 140)
        assert client.estimate_prompt(ASK) > before


def test_finish_reason_and_usage_are_reported():
    with FakeLLMServer(reply='{"facts": [{"a', finish_reason="length") as server:
        completion = ChatClient(server.url).chat(ASK, max_tokens=8)
        assert completion.cut and completion.finish_reason == "length"
        assert completion.prompt_tokens == estimate_messages(ASK)


@pytest.mark.parametrize("status, detail, rejection, limit", [
    (500, "[{'type': 'literal_error', 'msg': \"Input should be 'text' or 'json_object'\"}]", True, None),
    (500, "internal error", False, None),
    (400, "response_format is not supported", True, None),
    (422, "unprocessable", True, None),
    (400, json.dumps({"error": {"message": "This model's maximum context length is 4096 tokens.",
                                "code": "context_length_exceeded"}}), False, 4096),
    (400, '{"error":{"code":400,"message":"the request exceeds the available context size","n_ctx":2048}}',
     False, 2048),
    (500, "System role not supported", False, None),  # the chat template's, not the format's
    (400, "Conversation roles must alternate user/assistant/user/assistant/...", False, None),
    (400, "Unsupported value: 'messages[0].role' does not support 'system' with this model.", False, None),
    (422, "[{'type': 'literal_error', 'msg': \"Input should be 'user' or 'assistant'\"}]", False, None),
])
def test_errors_are_told_apart(status, detail, rejection, limit):
    assert is_rejection(status, detail) is rejection
    assert overflow_limit(status, detail) == limit


# -- opt-in: the real local model --------------------------------------------------------------
@pytest.mark.llm
@pytest.mark.timeout(1200)  # a small model on a busy CPU: minutes
def test_the_real_server_gets_a_schema_it_honours(real_llm_url):
    client = ChatClient(real_llm_url, timeout=120)
    reply = client.chat([{"role": "user", "content": 'List facts about: "I live in Porto." Answer as JSON.'}],
                        max_tokens=64, schema=SCHEMA)
    assert "facts" in json.loads(reply.text)
    assert client.traits.mode != "json_schema" or client.traits.confirmed
    assert client.available and reply.prompt_tokens
