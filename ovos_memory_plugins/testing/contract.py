"""The memory-plugin contract as executable checks (a conformance kit).

Usage from a third-party plugin's tests::

    from ovos_memory_plugins.testing import check_backend

    def test_my_backend_follows_the_contract(tmp_path):
        check_backend(lambda overrides: MyMemory({"db_path": str(tmp_path / "m.db"), **overrides}))

``factory(overrides)`` must return a *fresh, empty* memory each call, with ``overrides``
merged into its config. Backends with background work must make it visible after ``flush()``.

Beyond the two rules of every context (the system prompt may come first; the stripped utterance
always comes last, exactly as given), the kit checks what a user relies on: history in order,
sessions kept apart, the caller's objects untouched, clear errors for bad arguments, hostile
text harmless, ``forget`` and the ``export``/``import_session`` round trip where the backend
offers them, and, for a retriever, that ``search()`` really finds what was stored: a backend
whose query fails (and only logs it) does not pass.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from .._core.compat import AgentMessage, MessageRole

__all__ = ["check_backend", "check_person_scope", "CONTRACT_CHECKS", "PERSON_SCOPE_CHECKS"]

Factory = Callable[[dict[str, Any]], Any]
U, A, S = MessageRole.USER, MessageRole.ASSISTANT, MessageRole.SYSTEM


def _sid() -> str:
    return f"contract-{uuid.uuid4().hex[:8]}"


def _close(memory: Any) -> None:
    if hasattr(memory, "close"):
        memory.close()


def _flush(memory: Any) -> None:
    if hasattr(memory, "flush"):
        memory.flush()


def _role(msg: AgentMessage) -> str:
    return msg.role.value if isinstance(msg.role, MessageRole) else str(msg.role)


def check_last_message_is_the_stripped_utterance(factory: Factory) -> None:
    memory = factory({})
    try:
        sid = _sid()
        for utterance in ("  hello there  ", "what is my name?"):
            ctx = memory.build_conversation_context(utterance, sid)
            assert ctx, "build_conversation_context returned no messages"
            assert _role(ctx[-1]) == "user", f"last message is {_role(ctx[-1])}, not user"
            assert ctx[-1].content == utterance.strip()
        memory.update_history([AgentMessage(U, "my name is Ana"), AgentMessage(A, "Hello Ana")], sid)
        _flush(memory)
        ctx = memory.build_conversation_context("  and now?", sid)
        assert _role(ctx[-1]) == "user" and ctx[-1].content == "and now?"
    finally:
        _close(memory)


def check_first_message_may_be_the_system_prompt(factory: Factory) -> None:
    memory = factory({"system_prompt": "You are Contract Bot."})
    try:
        ctx = memory.build_conversation_context("hi", _sid())
        assert _role(ctx[0]) == "system", f"first message is {_role(ctx[0])}, expected the system prompt"
        assert "You are Contract Bot." in ctx[0].content
        systems = [m for m in ctx if "You are Contract Bot." in m.content]
        assert len(systems) == 1, "the system prompt appears more than once"
    finally:
        _close(memory)


def check_no_system_message_without_a_prompt_or_memory(factory: Factory) -> None:
    memory = factory({})
    try:
        ctx = memory.build_conversation_context("hi", _sid())
        assert [_role(m) for m in ctx] == ["user"], f"an empty memory added {[_role(m) for m in ctx[:-1]]}"
    finally:
        _close(memory)


def check_history_is_kept_in_order(factory: Factory) -> None:
    memory = factory({})
    try:
        sid = _sid()
        memory.update_history([AgentMessage(U, "first question"), AgentMessage(A, "first answer")], sid)
        memory.update_history([AgentMessage(U, "second question"), AgentMessage(A, "second answer")], sid)
        _flush(memory)
        history = memory.get_history(sid)
        assert isinstance(history, list)
        contents = [m.content for m in history]
        if contents:  # fact-only memories keep no turns
            order = [c for c in contents if c in ("first question", "first answer", "second question", "second answer")]
            assert order == sorted(order, key=["first question", "first answer", "second question",
                                               "second answer"].index), f"history out of order: {contents}"
            assert contents[-1] == "second answer"
    finally:
        _close(memory)


def check_unknown_session_is_empty(factory: Factory) -> None:
    memory = factory({})
    try:
        assert memory.get_history(_sid()) == []
    finally:
        _close(memory)


def check_sessions_are_isolated(factory: Factory) -> None:
    memory = factory({})
    try:
        a, b = _sid(), _sid()
        memory.update_history([AgentMessage(U, "my secret word is marmalade"), AgentMessage(A, "noted")], a)
        _flush(memory)
        assert all("marmalade" not in m.content for m in memory.get_history(b))
        ctx = memory.build_conversation_context("what is my secret word marmalade?", b)
        leaked = [m.content for m in ctx[:-1] if "marmalade" in m.content]
        assert not leaked, f"session {b} sees session {a}'s memory: {leaked}"
    finally:
        _close(memory)


def check_callers_objects_are_not_mutated(factory: Factory) -> None:
    config: dict[str, Any] = {"system_prompt": "Be brief."}
    snapshot = repr(config)
    memory = factory(config)
    try:
        sid = _sid()
        first = [AgentMessage(U, "q"), AgentMessage(A, "part one")]
        second = [AgentMessage(A, "part two")]
        memory.update_history(first, sid)
        memory.update_history(second, sid)
        assert second[0].content == "part two", "update_history mutated the caller's message"
        assert first[1].content == "part one"
        assert repr(config) == snapshot, "the plugin mutated the caller's config dict"
        history = memory.get_history(sid)
        if history:
            history[-1].content = "tampered"
            assert all(m.content != "tampered" for m in memory.get_history(sid)), "get_history leaks stored objects"
    finally:
        _close(memory)


def check_empty_update_is_a_no_op(factory: Factory) -> None:
    memory = factory({})
    try:
        sid = _sid()
        memory.update_history([], sid)
        memory.update_history([AgentMessage(U, "q"), AgentMessage(A, "a")], sid)
        memory.update_history([], sid)
        ctx = memory.build_conversation_context("next", sid)
        assert ctx[-1].content == "next"
    finally:
        _close(memory)


def check_bad_arguments_are_clear_errors(factory: Factory) -> None:
    memory = factory({})
    try:
        for call in (
            lambda: memory.build_conversation_context(None, _sid()),
            lambda: memory.update_history(None, _sid()),
            lambda: memory.update_history([AgentMessage(U, None)], _sid()),
            lambda: memory.get_history(None),
        ):
            try:
                call()
            except (TypeError, ValueError):
                continue
            raise AssertionError("bad input was accepted silently instead of raising TypeError/ValueError")
    finally:
        _close(memory)


def check_hostile_text_is_harmless(factory: Factory) -> None:
    memory = factory({})
    try:
        sid = "../../etc/passwd"
        nasty = ['"NEAR(a b)" OR x*', "'; DROP TABLE x; --", "\x00nul", "\ud800 bad surrogate", "مرحبا 👋", "   "]
        for text in nasty:
            memory.update_history([AgentMessage(U, text), AgentMessage(A, text)], sid)
        _flush(memory)
        for text in nasty:
            ctx = memory.build_conversation_context(text, sid)
            assert _role(ctx[-1]) == "user"
    finally:
        _close(memory)


def check_the_utterance_comes_back_exactly(factory: Factory) -> None:
    memory = factory({})
    try:
        sid = _sid()
        for utterance in ("x" * 1_000_000 + " end", "lone \ud800 surrogate", "  tabs\tand\nnewlines\n  "):
            ctx = memory.build_conversation_context(utterance, sid)
            assert _role(ctx[-1]) == "user", f"last message is {_role(ctx[-1])}, not user"
            got = ctx[-1].content
            assert got == utterance.strip(), (
                f"the utterance came back changed ({len(got)} chars, {got[:40]!r}...) instead of exactly, stripped")
    finally:
        _close(memory)


def _mentions(memory: Any, session_id: str, word: str) -> bool:
    history = memory.get_history(session_id)
    ctx = memory.build_conversation_context(f"what about {word}?", session_id)
    return any(word in m.content for m in [*history, *ctx[:-1]])


def check_forget_removes_the_session_only(factory: Factory) -> None:
    memory = factory({})
    try:
        if not callable(getattr(memory, "forget", None)):
            return
        gone, kept = _sid(), _sid()
        memory.update_history([AgentMessage(U, "my locker is quillwort"), AgentMessage(A, "noted")], gone)
        memory.update_history([AgentMessage(U, "my bike is called zephyrine"), AgentMessage(A, "noted")], kept)
        _flush(memory)
        kept_before = _mentions(memory, kept, "zephyrine")
        memory.forget(gone)
        _flush(memory)
        assert not _mentions(memory, gone, "quillwort"), "forget() left the session's text in its context"
        if callable(getattr(memory, "sessions", None)):
            assert gone not in memory.sessions(), "forget() left the session listed"
        assert _mentions(memory, kept, "zephyrine") == kept_before, "forget() of one session changed another"
    finally:
        _close(memory)


def check_export_then_import_gives_the_session_back(factory: Factory) -> None:
    source = factory({})
    target = None
    try:
        if not (callable(getattr(source, "export", None)) and callable(getattr(source, "import_session", None))):
            return
        sid = _sid()
        source.update_history([AgentMessage(U, "my cat is called pimpernel"), AgentMessage(A, "lovely name")], sid)
        _flush(source)
        data = source.export(sid)
        before = [m.content for m in source.get_history(sid)]
        target = factory({})
        target.import_session(data)
        _flush(target)
        after = [m.content for m in target.get_history(sid)]
        assert after == before, f"import_session(export()) gave the window {after}, not {before}"
        if callable(getattr(source, "search", None)) and not _has_no_retrievers(source):
            assert _found(target, "pimpernel cat", sid, "pimpernel"), "an imported exchange is not recalled"
    finally:
        _close(source)
        if target is not None:
            _close(target)


def _has_no_retrievers(memory: Any) -> bool:
    retrievers = getattr(memory, "retrievers", None)  # a composite whose members cannot search
    return isinstance(retrievers, list) and not retrievers


def _found(memory: Any, query: str, session_id: str, word: str) -> bool:
    return any(word in hit.content for hit in memory.search(query, session_id, top_k=5))


def check_a_retriever_recalls_what_it_stored(factory: Factory) -> None:
    memory = factory({})
    try:
        if not callable(getattr(memory, "search", None)) or _has_no_retrievers(memory):
            return
        sid = _sid()
        memory.update_history([AgentMessage(U, "my favourite animal is the axolotl"),
                               AgentMessage(A, "axolotls are wonderful")], sid)
        _flush(memory)
        assert _found(memory, "favourite animal axolotl", sid, "axolotl"), (
            "search() did not find the exchange just stored (a failing query is only logged: check the log)")
    finally:
        _close(memory)


def _follows_the_pipeline(memory: Any) -> bool:
    """Whether ``memory`` builds its context with this package's pipeline (inject modes, budgets):
    a capability, checked only where it is offered (a subclass that builds its own message list,
    as the reference's retrieval base allows, answers for it itself)."""
    from ..context import ContextMemory

    return isinstance(memory, ContextMemory) and \
        type(memory).build_conversation_context is ContextMemory.build_conversation_context


def _remember_a_little(memory: Any, session_id: str) -> None:
    memory.update_history([AgentMessage(U, "my name is Ana and I live in Porto"),
                           AgentMessage(A, "Nice to meet you, Ana")], session_id)
    memory.update_history([AgentMessage(U, "my dog is called Rex"), AgentMessage(A, "Rex is a good name")], session_id)
    _flush(memory)


def check_every_inject_mode_keeps_the_rules(factory: Factory) -> None:
    """In every inject mode: the prompt once and first, the utterance last; in ``system_prompt``
    mode one system message at most; in ``user`` mode no system message but the prompt."""
    from .._core.compat import HAS_TOOLS
    from ..inject import INJECT_MODES

    for mode in INJECT_MODES:
        if mode == "tool" and not HAS_TOOLS:
            continue
        memory = factory({"inject_mode": mode, "system_prompt": "You are Contract Bot."})
        try:
            if not _follows_the_pipeline(memory):
                return
            sid = _sid()
            _remember_a_little(memory, sid)
            ctx = memory.build_conversation_context("where does my dog live?", sid)
            roles = [_role(m) for m in ctx]
            assert roles[-1] == "user" and ctx[-1].content.endswith("where does my dog live?"), f"{mode}: {roles}"
            assert roles[0] == "system" and "You are Contract Bot." in ctx[0].content, f"{mode}: prompt not first"
            assert sum("You are Contract Bot." in m.content for m in ctx) == 1, f"{mode}: the prompt is repeated"
            if mode in ("system_prompt", "user"):
                assert roles.count("system") == 1, f"{mode}: {roles.count('system')} system messages"
            if mode == "user":
                assert "developer" not in roles
        finally:
            _close(memory)


def check_the_token_budget_bounds_the_context(factory: Factory) -> None:
    """``max_context_tokens`` bounds the whole context; the prompt and the utterance always fit."""
    from .._core.tokens import estimate_tokens

    memory = factory({"max_context_tokens": 60, "system_prompt": "You are Contract Bot."})
    try:
        if not _follows_the_pipeline(memory):
            return
        sid = _sid()
        for i in range(6):
            memory.update_history([AgentMessage(U, f"tell me a long story number {i} about dragons and castles"),
                                   AgentMessage(A, "Once upon a time " + "there was a dragon in a castle " * 6)], sid)
        _flush(memory)
        ctx = memory.build_conversation_context("and then?", sid)
        assert ctx[-1].content == "and then?" and "You are Contract Bot." in ctx[0].content
        used = sum(estimate_tokens(m.content) + 4 for m in ctx)
        assert used <= 60, f"the context costs about {used} tokens, over max_context_tokens 60"
    finally:
        _close(memory)


CONTRACT_CHECKS: tuple[Callable[[Factory], None], ...] = (
    check_last_message_is_the_stripped_utterance,
    check_first_message_may_be_the_system_prompt,
    check_no_system_message_without_a_prompt_or_memory,
    check_history_is_kept_in_order,
    check_unknown_session_is_empty,
    check_sessions_are_isolated,
    check_callers_objects_are_not_mutated,
    check_empty_update_is_a_no_op,
    check_bad_arguments_are_clear_errors,
    check_hostile_text_is_harmless,
    check_the_utterance_comes_back_exactly,
    check_forget_removes_the_session_only,
    check_export_then_import_gives_the_session_back,
    check_a_retriever_recalls_what_it_stored,
    check_every_inject_mode_keeps_the_rules,
    check_the_token_budget_bounds_the_context,
)


# -- person scope ----------------------------------------------------------------------------
def _people(**extra: Any) -> dict[str, Any]:
    """Person-scope overrides: ana owns the kitchen and every ``ana-`` session, ben his phone."""
    return {"scope": "person", "people": {"ana": ["kitchen", "ana-*"], "ben": ["ben-phone"]}, **extra}


def _tell(memory: Any, session_id: str, text: str) -> None:
    memory.update_history([AgentMessage(U, text), AgentMessage(A, "I will remember that.")], session_id)
    _flush(memory)


#: Said in one session and looked for in others: the offline fact rules keep it too.
_SECRET = ("my name is Quillwort", "Quillwort")


def check_a_person_is_remembered_across_their_sessions(factory: Factory) -> None:
    memory = factory(_people())
    try:
        _tell(memory, "kitchen", _SECRET[0])
        assert _mentions(memory, "ana-bedroom", _SECRET[1]), (
            "what ana said in the kitchen is not in the context of her bedroom session")
    finally:
        _close(memory)


def check_guests_and_other_people_see_nothing_of_a_person(factory: Factory) -> None:
    memory = factory(_people())
    try:
        _tell(memory, "ana-phone", _SECRET[0])
        for other in ("ben-phone", _sid()):
            assert not _mentions(memory, other, _SECRET[1]), f"session {other!r} sees ana's memory"
        _tell(memory, "guest-" + _sid(), "my name is Brambleton")
        assert not _mentions(memory, "kitchen", "Brambleton"), "a guest's words reached ana's memory"
    finally:
        _close(memory)


def check_forget_from_one_session_forgets_the_person(factory: Factory) -> None:
    memory = factory(_people())
    try:
        if not callable(getattr(memory, "forget", None)):
            return
        _tell(memory, "kitchen", _SECRET[0])
        _tell(memory, "ben-phone", "my name is Zephyrine")
        memory.forget("ana-car")
        _flush(memory)
        for session_id in ("kitchen", "ana-car"):
            assert not _mentions(memory, session_id, _SECRET[1]), f"forget left ana's memory in {session_id!r}"
        assert _mentions(memory, "ben-phone", "Zephyrine"), "forgetting ana changed ben's memory"
        assert sorted(memory.people()) == ["ana", "ben"]
    finally:
        _close(memory)


def check_export_person_holds_what_every_session_of_the_person_stored(factory: Factory) -> None:
    memory = factory(_people())
    try:
        _tell(memory, "kitchen", _SECRET[0])
        data = memory.export_person("ana")
        assert _SECRET[1] in repr(data), "export_person('ana') does not hold what ana said"
        assert data == memory.export("ana-garden"), "export_person differs from the export of one of her sessions"
        assert "Quillwort" not in repr(memory.export_person("ben")), "ben's export holds ana's words"
        memory.forget_person("ana")
        _flush(memory)
        assert not _mentions(memory, "kitchen", _SECRET[1]), "forget_person('ana') left her memory"
    finally:
        _close(memory)


def check_a_session_claimed_by_two_people_is_refused(factory: Factory) -> None:
    try:
        memory = factory({"scope": "person", "people": {"ana": ["kitchen"], "ben": ["kitchen", "ben-phone"]}})
    except ValueError as exc:
        assert "'kitchen'" in str(exc) and "'ana'" in str(exc) and "'ben'" in str(exc), (
            f"the error does not name the session and both people: {exc}")
        return
    _close(memory)
    raise AssertionError("a session claimed by two people was accepted")


def check_a_caller_cannot_name_a_persons_memory(factory: Factory) -> None:
    memory = factory(_people())
    try:
        _tell(memory, "kitchen", _SECRET[0])
        try:
            memory.build_conversation_context("what is my name?", "person:ana")
        except ValueError:
            return
        raise AssertionError("the session id 'person:ana' was accepted: a guest could read ana's memory")
    finally:
        _close(memory)


#: What a backend offering ``scope: person`` (see docs/people.md) must do.
PERSON_SCOPE_CHECKS: tuple[Callable[[Factory], None], ...] = (
    check_a_person_is_remembered_across_their_sessions,
    check_guests_and_other_people_see_nothing_of_a_person,
    check_forget_from_one_session_forgets_the_person,
    check_export_person_holds_what_every_session_of_the_person_stored,
    check_a_session_claimed_by_two_people_is_refused,
    check_a_caller_cannot_name_a_persons_memory,
)


def _run(checks: tuple[Callable[[Factory], None], ...], factory: Factory) -> None:
    for check in checks:
        try:
            check(factory)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}: {exc}") from exc


def check_backend(factory: Factory) -> None:
    """Run every contract check; the first failure raises ``AssertionError`` naming the rule."""
    _run(CONTRACT_CHECKS, factory)


def check_person_scope(factory: Factory) -> None:
    """Run the person-scope checks (for a backend that takes ``scope: person`` and ``people``)."""
    _run(PERSON_SCOPE_CHECKS, factory)
