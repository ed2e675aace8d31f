"""Utterances, messages and session ids nobody controls are harmless.

Through every backend's three contract methods (and ``search`` where there is one): no
exception escapes except a clear ``TypeError``/``ValueError`` for a non-string, a 1 MB message
is truncated to ``messages.MAX_MESSAGE_CHARS`` and does not slow later turns, and no file is
created outside the configured data directory, whatever the session id says.
"""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.messages import MAX_MESSAGE_CHARS
from tests._host_messages import WIRE_CALL, Said
from tests._timing import patience
from tests.reliability._harness import (
    entry_points,
    make_memory,
    marker,
    members_of,
    snapshot_tree,
    spec_for,
    timed,
    views,
    with_postgres,
)
from tests.reliability._report import record

U, A = MessageRole.USER, MessageRole.ASSISTANT
ENTRY_POINTS = entry_points()
STORES = with_postgres(ENTRY_POINTS)
EXAMPLES = int(os.environ.get("OVOS_MEMORY_HOSTILE_EXAMPLES", "100"))

NASTY_TEXT = [
    "", "   ", "\t\n\r ", "\x00", "a\x00b", "\ud800", "lone \udfff surrogate", "\ud83d\ude00 paired by hand",
    "مرحبا، ما اسمي؟", "שלום עולם", "\u202eevil right-to-left override", "👋🏽🇵🇹👨‍👩‍👧 emoji", "é" * 3 + "\u0301",
    '"NEAR(a b)" OR x*', "a AND b NOT c", "content:secret", "^start", "{a b}: c", '"', "''", "*", "-", "NEAR/3",
    "'; DROP TABLE window; --", "Robert'); DROP TABLE Students;--", "%_\\", "1 OR 1=1", "); SELECT * FROM x; --",
    "{system}{header}{context}{0}", "%s %d %(x)s", "\\x00\\n", "x" * 10_000, "word " * 3_000,
]
NASTY_SESSIONS = [
    "../../etc", "a/b", "", "x" * 10_000, "..", "/etc/passwd", "C:\\Windows\\system32", "~", "$HOME",
    "${XDG_DATA_HOME}/x", "line\nbreak", "\x00", "nul\x00inside", "👋", "*", "%", "?", "key:with:colons",
    "{hash-tag}", "sp ace", "'; DROP TABLE window; --", "\ud800",
]
_alphabet = st.one_of(st.characters(), st.characters(codec=None, categories=["Cs"]))
texts = st.one_of(st.sampled_from(NASTY_TEXT), st.text(_alphabet, max_size=300))
sessions = st.one_of(st.sampled_from(NASTY_SESSIONS), st.text(_alphabet, max_size=40))


@pytest.fixture
def sandbox(tmp_path, tmp_path_factory, monkeypatch):
    """A working directory inside pytest's temp root, and the tree to watch for stray files."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    root = tmp_path_factory.getbasetemp()
    return root, [tmp_path / "store", Path(os.environ["XDG_DATA_HOME"])]


def _stray_files(before: set[str], root: Path, allowed: list[Path]) -> list[str]:
    after = snapshot_tree(root)
    return sorted(p for p in after - before if not any(Path(p).is_relative_to(a) for a in allowed))


def _name(entry_point: str, store: dict[str, Any]) -> str:
    return f"{entry_point} (postgres)" if store else entry_point


def _valid_id(sid: str) -> bool:
    try:
        sid.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _use(memory: Any, utterance: str, reply: str, sid: str) -> int:
    """The three methods (and search) with these inputs; returns the clear errors raised."""
    if not _valid_id(sid):
        # Documented: a session id no store can key (a lone surrogate) is a ValueError.
        calls = [lambda: memory.update_history([AgentMessage(U, utterance)], sid),
                 lambda: memory.build_conversation_context(utterance, sid), lambda: memory.get_history(sid)]
        for call in calls:
            with pytest.raises(ValueError, match="session_id"):
                call()
        return len(calls)
    memory.update_history([AgentMessage(U, utterance), AgentMessage(A, reply)], sid)
    memory.update_history([AgentMessage(U, utterance)], sid)  # a hanging question
    memory.update_history([AgentMessage(A, reply), AgentMessage(A, reply)], sid)  # a reply in parts
    context = memory.build_conversation_context(utterance, sid)
    assert context and context[-1].role == U and context[-1].content == utterance.strip() or \
        context[-1].content == utterance.encode("utf-8", "replace").decode("utf-8").strip()
    assert isinstance(memory.get_history(sid), list)
    search = getattr(memory, "search", None)
    if callable(search):
        assert isinstance(search(utterance, sid), list)
    return 0


@pytest.mark.parametrize(("entry_point", "store"), STORES)
def test_generated_hostile_text_and_session_ids_never_escape_or_write_outside(entry_point, store, tmp_path, sandbox):
    root, allowed = sandbox
    before = snapshot_tree(root)
    memory = make_memory(entry_point, tmp_path / "store", store)
    tried, clear = [], []
    try:
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(utterance=texts, reply=texts, sid=sessions)
        def run(utterance: str, reply: str, sid: str) -> None:
            tried.append(1)
            clear.append(_use(memory, utterance, reply, sid))

        run()
        for sid in NASTY_SESSIONS:  # every listed id, whatever hypothesis picked
            clear.append(_use(memory, "my name is Ana", "hello", sid))
            tried.append(1)
        for member in members_of(memory):
            if hasattr(member, "flush"):
                assert member.flush(patience(60)) is not False
    finally:
        memory.close()
    stray = _stray_files(before, root, allowed)
    assert not stray, f"files created outside the data directory: {stray[:10]}"
    record("hostile", _name(entry_point, store), **{"inputs tried": len(tried), "escaped exceptions": 0,
                                      "clear TypeError/ValueError": sum(clear),
                                      "files outside data dir": len(stray)})


BAD_CALLS = {
    "utterance None": lambda m: m.build_conversation_context(None, "s"),
    "utterance bytes": lambda m: m.build_conversation_context(b"hi", "s"),
    "session None (context)": lambda m: m.build_conversation_context("hi", None),
    "session None (history)": lambda m: m.get_history(None),
    "session int": lambda m: m.update_history([AgentMessage(U, "q")], 42),
    "messages None": lambda m: m.update_history(None, "s"),
    "messages str": lambda m: m.update_history("hello", "s"),
    "content None": lambda m: m.update_history([AgentMessage(U, None)], "s"),
    "content int": lambda m: m.update_history([AgentMessage(A, 3)], "s"),
    "item str": lambda m: m.update_history(["hello"], "s"),
    "unknown role": lambda m: m.update_history([{"role": "wizard", "content": "x"}], "s"),
    "dict without content": lambda m: m.update_history([{"role": "user"}], "s"),
}


@pytest.mark.parametrize(("entry_point", "store"), STORES)
def test_none_and_other_non_strings_are_clear_type_or_value_errors(entry_point, store, tmp_path):
    memory = make_memory(entry_point, tmp_path / "store", store)
    clear = 0
    try:
        for name, call in BAD_CALLS.items():
            with pytest.raises((TypeError, ValueError)) as caught:
                call(memory)
            message = str(caught.value)
            assert any(word in message for word in ("session_id", "utterance", "new_messages", "content", "role",
                                                    "message")), f"{name}: unclear error {message!r}"
            clear += 1
        if callable(getattr(memory, "search", None)):
            with pytest.raises(TypeError):
                memory.search(None)
            clear += 1
        # The memory still works after all of that.
        memory.update_history([AgentMessage(U, "still fine?"), AgentMessage(A, "yes")], "s")
        assert memory.build_conversation_context("ok", "s")[-1].content == "ok"
    finally:
        memory.close()
    record("hostile", _name(entry_point, store), **{"inputs tried": clear, "clear TypeError/ValueError": clear})


@pytest.mark.parametrize(("entry_point", "store"), STORES)
def test_a_one_megabyte_message_is_truncated_and_does_not_slow_later_turns(entry_point, store, tmp_path):
    memory = make_memory(entry_point, tmp_path / "store", store)
    sid = "big"
    try:
        counter = iter(range(10_000))

        def turn() -> None:
            n = next(counter)
            memory.build_conversation_context(f"what about topic {n}?", sid)
            memory.update_history([AgentMessage(U, f"tell me about topic {n}"), AgentMessage(A, f"topic {n} is ok")],
                                  sid)

        for _ in range(3):
            turn()  # warm up (first connection, lazy loads)
        before = timed(turn, 7)
        huge = "I like big messages. " + "x" * 1_000_000
        memory.update_history([AgentMessage(U, huge), AgentMessage(A, "y" * 1_000_000)], sid)
        for member in members_of(memory):
            if hasattr(member, "flush"):
                assert member.flush(patience(120)) is not False
        after = timed(turn, 7)
        lengths = [len(m.content) for m in memory.get_history(sid)]
        context = memory.build_conversation_context("and now?", sid)
    finally:
        memory.close()
    assert all(n <= MAX_MESSAGE_CHARS for n in lengths), f"a stored message exceeds the limit: {max(lengths)}"
    assert all(len(m.content) <= 3 * MAX_MESSAGE_CHARS for m in context), "the context carries the 1 MB message"
    ratio = after / max(before, 1e-6)
    # Generous: the machine is shared and noisy; a turn that re-reads or re-scans 1 MB is far beyond it.
    assert after <= 10 * before + 0.05, f"turns after a 1 MB message take {ratio:.1f}x as long"
    record("hostile", _name(entry_point, store),
           **{"inputs tried": 1, "1 MB turn then normal turn, time ratio": round(ratio, 2)})


RETRIEVERS = [ep for ep in ENTRY_POINTS if ep.endswith(("lexical", "local-rag", "composite"))]


@pytest.mark.parametrize("inject_mode", ["system", "developer", "system_prompt", "user"])
@pytest.mark.parametrize(("entry_point", "store"), with_postgres(RETRIEVERS))
def test_recalled_text_with_format_fields_is_injected_literally(entry_point, store, inject_mode, tmp_path):
    # Templates are str.format'ed with recalled text as values; text that looks like a template
    # ("{system}", "{0}", "{") must never be formatted a second time.
    nasty = "braces {system} {header} {context} {utterance} {0} {} {x.__class__} { and } alone"
    config = {"inject_mode": inject_mode, "system_prompt": "Base {prompt}.", "max_history": 2, **store}
    memory = make_memory(entry_point, tmp_path / "store", config)
    try:
        memory.update_history([AgentMessage(U, nasty), AgentMessage(A, nasty)], "s")
        memory.update_history([AgentMessage(U, "filler one"), AgentMessage(A, "filler two")], "s")  # out of
        memory.update_history([AgentMessage(U, "filler three"), AgentMessage(A, "filler four")], "s")  # the window
        for member in members_of(memory):
            if hasattr(member, "flush"):
                member.flush(patience(30))
        context = memory.build_conversation_context("braces alone", "fresh-session")
        recalled = memory.build_conversation_context("braces alone {0} {utterance}", "s")
    finally:
        memory.close()
    assert context[-1].content == "braces alone"
    assert recalled[-1].role == U
    text = "\n".join(m.content for m in recalled)
    assert "{system} {header} {context} {utterance} {0} {} {x.__class__} { and }" in text
    assert "Base {prompt}." in text
    if entry_point.endswith(("lexical", "local-rag")):  # recalled: the 2-message window holds only fillers
        assert nasty in text
    record("hostile", _name(entry_point, store), **{"inputs tried": 2})


@pytest.mark.parametrize(("entry_point", "store"), STORES)
def test_one_update_with_five_thousand_messages_is_stored_whole(entry_point, store, tmp_path):
    # A client replaying a long conversation in one call (an import, a reconnecting satellite).
    messages = [AgentMessage(U if i % 2 == 0 else A, f"I like zqbulkn{i:05d}") for i in range(5_000)]
    for view, counts in _stored(entry_point, store, tmp_path, [messages], "bulk").items():
        missing = [i for i in range(0, 5_000, 2) if counts[marker("bulk", i)] != 1]
        assert not missing, f"{view}: {len(missing)} of 2,500 user turns of the update missing, e.g. {missing[:3]}"
    record("hostile", _name(entry_point, store), **{"inputs tried": 1})


#: Tool calls of the shapes a careless host sends: the OpenAI wire format (arguments a JSON text),
#: a ToolCall-like object with JSON-text arguments, a string, a number.
BAD_TOOL_CALLS = {
    "wire format": [WIRE_CALL],
    "JSON-text arguments": [SimpleNamespace(id="c1", name="weather", arguments='{"city": "Porto"}')],
    "a string": "notalist",
    "a number": [5],
}


@pytest.mark.parametrize(("entry_point", "store"), STORES)
def test_malformed_tool_calls_never_lose_the_exchange(entry_point, store, tmp_path):
    updates = [[Said("user", f"I like {marker('tool', n)}"), Said("assistant", "", tool_calls=calls),
                Said("tool", "sunny", tool_call_id="c1", name="weather"), Said("assistant", "It is sunny")]
               for n, calls in enumerate(BAD_TOOL_CALLS.values())]
    for view, counts in _stored(entry_point, store, tmp_path, updates, "s").items():
        missing = [name for n, name in enumerate(BAD_TOOL_CALLS) if counts[marker("tool", n)] < 1]
        assert not missing, f"{view}: the exchange with tool calls as {missing} was lost"
    record("hostile", _name(entry_point, store), **{"inputs tried": len(BAD_TOOL_CALLS)})


def _stored(entry_point: str, store: dict[str, Any], tmp_path: Path, updates: list[list[Any]],
            sid: str) -> dict[str, Any]:
    """The marker counts of each view of the export after ``updates`` (every member flushed), the
    composite members' own windows left out (bounded by the factory's member config); the turn
    after them still ends with its utterance."""
    memory = make_memory(entry_point, tmp_path / "store", {**spec_for(entry_point).keep_all, **store})
    try:
        for update in updates:
            memory.update_history(update, sid)
        for member in members_of(memory):
            if hasattr(member, "flush"):
                assert member.flush(patience(120)) is not False
        exported = memory.export(sid)
        context = memory.build_conversation_context("and now?", sid)
    finally:
        memory.close()
    assert context[-1].content == "and now?"
    return {view: counts for view, counts in views(exported).items()
            if not ("/" in view and view.endswith("window"))}
