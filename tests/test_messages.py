"""Normalisation rules (docs/index.md) as properties, and the dict round-trip."""
from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

from ovos_memory_plugins._core.compat import HAS_TOOLS, make_message
from ovos_memory_plugins.messages import (
    MAX_MESSAGE_CHARS,
    RAW_ARGUMENTS,
    coerce_messages,
    context_window,
    fold_into,
    from_dict,
    is_role,
    role_of,
    to_dict,
)
from tests._host_messages import WIRE_CALL, Said

U, A, S = MessageRole.USER, MessageRole.ASSISTANT, MessageRole.SYSTEM
message = st.builds(AgentMessage, st.sampled_from([U, A]), st.text(max_size=8))


def apply(stored, new):
    pop, add = fold_into(stored[-1] if stored else None, new)
    return (stored[:-1] if pop else stored) + add


@given(st.lists(st.lists(message, max_size=4), max_size=8))
def test_a_window_never_holds_two_user_or_two_assistant_messages_in_a_row(updates):
    window = []
    for new in updates:
        window = apply(window, new)
    for a, b in zip(window, window[1:]):
        assert a.role != b.role


@given(st.lists(message, max_size=6), st.lists(message, max_size=6))
def test_folding_never_mutates_its_inputs_and_keeps_every_assistant_word(stored, new):
    before = [(m.role, m.content) for m in stored + new]
    window = apply(list(stored), new)
    assert [(m.role, m.content) for m in stored + new] == before
    said = "".join(m.content for m in new if m.role == A)
    kept = "".join(m.content for m in window if m.role == A).replace("\n", "")
    assert said.replace("\n", "") in kept


def test_a_hanging_question_is_replaced_by_the_next_one():
    pop, add = fold_into(AgentMessage(U, "hello?"), [AgentMessage(U, "hi"), AgentMessage(A, "hey")])
    assert pop and [m.content for m in add] == ["hi", "hey"]


def test_consecutive_answers_merge_with_a_newline_into_a_new_object():
    tail, new = AgentMessage(A, "one"), AgentMessage(A, "two")
    pop, add = fold_into(tail, [new])
    assert pop and add[0].content == "one\ntwo" and add[0] is not new and new.content == "two"


def test_context_window_drops_trailing_questions_and_optionally_leading_answers():
    h = [AgentMessage(A, "orphan"), AgentMessage(U, "q"), AgentMessage(A, "a"), AgentMessage(U, "dangling")]
    assert [m.content for m in context_window(h)] == ["orphan", "q", "a"]
    assert [m.content for m in context_window(h, drop_leading_answers=True)] == ["q", "a"]


@pytest.mark.parametrize("bad, error", [(None, TypeError), ("text", TypeError), ([object()], TypeError),
                                        ([AgentMessage(U, None)], TypeError), ([AgentMessage("bot", "x")], ValueError),
                                        ([{"content": "x"}], ValueError)])
def test_bad_updates_are_clear_errors(bad, error):
    with pytest.raises(error):
        coerce_messages(bad)


def test_dicts_are_accepted_and_text_is_made_storable():
    huge = AgentMessage(A, "x" * (MAX_MESSAGE_CHARS + 5))
    out = coerce_messages([{"role": "user", "content": "bad \ud800 surrogate"}, huge])
    assert is_role(out[0], "user") and "\ud800" not in out[0].content
    assert len(out[1].content) == MAX_MESSAGE_CHARS


def test_the_openai_shapes_of_a_tool_call_turn_and_of_content_parts_are_stored_as_text():
    out = coerce_messages([
        {"role": "user", "content": [{"type": "text", "text": "what is in"}, {"type": "image_url", "image_url": {}},
                                     "this picture?"]},
        {"role": "assistant", "content": None, "tool_calls": [WIRE_CALL]},
    ])
    assert out[0].content == "what is in\nthis picture?" and out[1].content == ""
    with pytest.raises(TypeError, match=r"new_messages\[0\].content must be a str, not NoneType"):
        coerce_messages([{"role": "user", "content": None}])  # no calls beside it: a mistake
    with pytest.raises(TypeError, match="not dict"):
        coerce_messages([{"role": "user", "content": {"text": "x"}}])


def test_a_tool_result_goes_into_the_context_only_after_the_call_that_asked_for_it():
    said = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": None, "tool_calls": [WIRE_CALL]},
            {"role": "tool", "content": "sunny", "tool_call_id": WIRE_CALL["id"]},
            {"role": "assistant", "content": "It's sunny"}]
    window = [m.content for m in context_window(coerce_messages(said))]
    # Where the message type holds tool calls, the call and its result stay together; where it
    # cannot (the stable OPM), neither an empty answer nor an orphaned result reaches a prompt.
    assert window == (["weather?", "", "sunny", "It's sunny"] if HAS_TOOLS else ["weather?", "It's sunny"])


def test_a_message_over_the_limit_keeps_its_start_and_its_end_and_says_what_was_cut(caplog):
    from ovos_utils.log import LOG

    LOG.create_logger("OVOS").propagate = True
    said = "start " + "lorem ipsum " * 10_000 + "the door code is 4411"
    with caplog.at_level("WARNING"):
        for _ in range(2):
            [kept] = coerce_messages([AgentMessage(U, said)])
    assert len(kept.content) == MAX_MESSAGE_CHARS
    assert kept.content.startswith("start lorem") and kept.content.endswith("the door code is 4411")
    cut = len(said) - MAX_MESSAGE_CHARS + len(f"\n[... {len(said) - MAX_MESSAGE_CHARS} characters cut ...]\n")
    assert f"\n[... {cut} characters cut ...]\n" in kept.content
    assert sum("its middle" in r.getMessage() for r in caplog.records) == 2  # every cut, not only the first


def test_round_trip_keeps_tool_fields_when_opm_has_them():
    if HAS_TOOLS:
        from ovos_plugin_manager.templates.agents import ToolCall

        msg = make_message(A, "", tool_calls=[ToolCall(id="c1", name="search", arguments={"q": "x"})])
        back = from_dict(to_dict(msg))
        assert back.tool_calls[0].id == "c1" and back.tool_calls[0].arguments == {"q": "x"}
        tool = make_message(MessageRole.TOOL, "result", tool_call_id="c1", name="search")
        assert to_dict(tool) == {"role": "tool", "content": "result", "tool_call_id": "c1", "name": "search"}
    else:
        assert to_dict(AgentMessage(U, "x")) == {"role": "user", "content": "x"}
        assert from_dict({"role": "assistant", "content": "y", "tool_calls": [{"id": "c"}]}).content == "y"


def test_a_budget_cut_never_leaves_an_answer_without_its_question():
    from ovos_memory_plugins.messages import fit_window, message_tokens

    msgs = [AgentMessage(U, "one two three four five six"), AgentMessage(A, "ok"),
            AgentMessage(U, "five"), AgentMessage(A, "fine")]
    budget = sum(message_tokens(m.content) for m in msgs[1:])  # room for everything but the first question
    kept, left = fit_window(msgs, budget)
    assert [m.content for m in kept] == ["five", "fine"]
    assert left == budget - message_tokens("five") - message_tokens("fine")
    assert fit_window(msgs, 10_000)[0] == msgs  # everything fits: nothing dropped


@pytest.mark.parametrize(("calls", "expected"), [
    ([WIRE_CALL], [{"id": "c1", "name": "weather", "arguments": {"city": "Porto"}}]),
    ([SimpleNamespace(id="c1", name="weather", arguments='{"city": "Porto"}')],
     [{"id": "c1", "name": "weather", "arguments": {"city": "Porto"}}]),
    (json.dumps([WIRE_CALL]), [{"id": "c1", "name": "weather", "arguments": {"city": "Porto"}}]),
    ([{"id": 7, "name": "say", "arguments": "plain text"}],
     [{"id": "7", "name": "say", "arguments": {RAW_ARGUMENTS: "plain text"}}]),
    ([{"id": "c2", "name": "when", "arguments": {"at": dt.date(2024, 5, 1)}}],
     [{"id": "c2", "name": "when", "arguments": {"at": "2024-05-01"}}]),
    ("notalist", None),
    ([5], None),
    ([5, WIRE_CALL], [{"id": "c1", "name": "weather", "arguments": {"city": "Porto"}}]),
])
def test_tool_calls_of_any_shape_are_normalised_and_the_message_kept(calls, expected):
    out = coerce_messages([Said("user", "weather in Porto?"), Said("assistant", "checking", tool_calls=calls),
                           Said("tool", "sunny", tool_call_id=5, name="weather")])
    assert [m.content for m in out] == ["weather in Porto?", "checking", "sunny"]
    stored = [to_dict(m) for m in out]
    assert stored[1].get("tool_calls") == expected
    assert stored[2] == {"role": "tool", "content": "sunny", "tool_call_id": "5", "name": "weather"}
    json.dumps(stored)  # every store can write it


def test_a_stored_message_with_malformed_tool_calls_reads_back():
    for calls in ("notalist", [5], [WIRE_CALL]):
        back = from_dict({"role": "assistant", "content": "y", "tool_calls": calls})
        assert back.content == "y"
        if HAS_TOOLS:
            assert (back.tool_calls is None) == (calls != [WIRE_CALL])


@pytest.mark.parametrize("one", [{"role": "user", "content": "hi"}, AgentMessage(MessageRole.USER, "hi")])
def test_one_message_instead_of_a_list_is_named_as_such(one):
    with pytest.raises(TypeError, match="must be a list of messages, not one .*wrap it in a list"):
        coerce_messages(one)


def test_context_window_leaves_out_blank_answers_and_keeps_the_roles_alternating():
    said = [("user", "my name is Ana"), ("assistant", ""), ("user", "I live in Lyon"), ("assistant", "  \n"),
            ("user", "hi"), ("assistant", "hello"), ("user", "and my dog?"), ("assistant", " ")]
    window = context_window([make_message(role, text) for role, text in said])
    assert [(role_of(m), m.content) for m in window] == [("user", "my name is Ana\nI live in Lyon\nhi"),
                                                         ("assistant", "hello")]
    kept = [make_message("user", "a"), make_message("user", "b"), make_message("assistant", "ok")]
    assert context_window(kept) == kept  # no answer left out: the window as stored
