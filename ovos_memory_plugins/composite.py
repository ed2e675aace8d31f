"""``CompositeMemory``: several memories in one ``memory_module`` slot, fused into one context.

Members are any ``opm.agents.memory`` plugins. Those with ``search()`` are *retrievers*: their
hits are fused (rrf by default) into one deduplicated ranked list. The others are *plain*
members (a summary, facts, a window): they contribute the system blocks they add. The
*primary* member (default: the first) provides the verbatim history. ``update_history``
writes through to every member. A member that fails to load, or raises at run time, is
skipped and logged once; the turn goes on without it.

Differences from the reference, all deliberate: ``min_score`` applies after fusion (to the
fused score for rrf and weighted), ``search()`` returns the fused hits (so a composite can be
a member or a tool), plain members are asked only for their added blocks and never duplicate
a system prompt, recall already in the window is not injected again, ``max_context_tokens``
bounds the whole added context, and ``preset: "hybrid"`` gives the recommended members.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from ._core.compat import AgentMessage
from ._core.imports import session_export
from ._core.loading import load_memory_class
from ._core.log import LogOnce
from .common import MemoryHit
from .config import option
from .errors import ConfigError, MemoryPluginError
from .fusion import FUSION_MODES, fuse
from .messages import check_session_id, check_utterance, clean_text, coerce_messages, is_role
from .retrieval import BaseRetrievalMemory, RetrievalConfig, drop_window_duplicates

__all__ = ["HYBRID_PRESET", "CompositeConfig", "CompositeMemory", "Member"]

COMPOSITE = "ovos-memory-plugin-composite"

#: The recommended hybrid: a verbatim window, keyword and semantic recall, and user facts. Both
#: retrievers index each exchange with its neighbours (retrieval.neighbour_weight, _neighbours.py):
#: on LoCoMo dev that is what lifts the fused recall@5 from 0.70 to 0.77 (docs/benchmarks.md).
HYBRID_PRESET: tuple[dict[str, Any], ...] = (
    {"module": "ovos-memory-plugin-recency", "config": {"max_history": 10, "db_path": "hybrid_recency.db"}},
    {"module": "ovos-memory-plugin-lexical", "config": {"db_path": "hybrid_lexical.db",
                                                        "retrieval": {"neighbour_weight": 0.5}}},
    {"module": "ovos-memory-plugin-local-rag", "config": {"db_path": "hybrid_local_rag.db",
                                                          "collection": "ovos_hybrid_rag",
                                                          "retrieval": {"neighbour_weight": 0.5}}},
    {"module": "ovos-memory-plugin-entity", "config": {"db_path": "hybrid_entity.json"}},
)


@dataclasses.dataclass(frozen=True)
class CompositeConfig(RetrievalConfig):
    members: list[Any] = option([], 'members: {"module", "weight", "config"} dicts or bare entry-point names')
    preset: str | None = option(None, "hybrid: recency + lexical + local-rag + entity when members is empty",
                                kind=str, choices=("hybrid",))
    primary: str | None = option(None, "member whose history is the verbatim window; null: the first", kind=str)
    fusion: str = option("rrf", "how retriever hits are fused", choices=FUSION_MODES)
    rrf_k: int = option(60, "rrf constant k", minimum=1)
    top_k: int | None = option(None, "recalled items (top level; falls back to retrieval.max_num_results)",
                               key="max_num_results", kind=int, minimum=1)
    member_fetch_k: int | None = option(None, "hits asked of each retriever; null: 2 x max_num_results",
                                        kind=int, minimum=1)
    dedup: bool = option(True, "fuse identical texts from several retrievers into one")

    def __post_init__(self) -> None:
        super().__post_init__()
        for i, spec in enumerate(self.members):
            if not isinstance(spec, (str, Mapping)) or (isinstance(spec, Mapping) and not spec.get("module")):
                raise ConfigError(f"'members[{i}]' must be an entry-point name or a dict with a 'module' key")


class Member(NamedTuple):
    """A loaded member, as the reference lists them: ``(name, instance, weight)``.

    Attribute access falls through to the instance, so ``composite.primary.get_history(sid)``
    works as well as ``name, instance, weight = composite.primary``.
    """

    name: str          # unique within the composite (module, or module#2 for repeats)
    memory: Any
    weight: float

    @property
    def module(self) -> str:
        return self.name.split("#", 1)[0]

    @property
    def is_retriever(self) -> bool:
        return callable(getattr(self.memory, "search", None))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.memory, name)


class CompositeMemory(BaseRetrievalMemory):
    """Fuses its members; see the module docstring.

    Example::

        CompositeMemory({"members": ["ovos-memory-plugin-recency",
                                     {"module": "ovos-memory-plugin-lexical", "weight": 1.0}],
                         "fusion": "rrf", "max_num_results": 5})
    """

    Config: ClassVar[type] = CompositeConfig
    plugin_name: ClassVar[str] = COMPOSITE
    # It stores nothing itself: its window and documents are its members'.
    keeps_documents: ClassVar[bool] = False
    own_attributes: ClassVar[frozenset[str]] = frozenset({"members", "primary"})
    live_settings: ClassVar[frozenset[str]] = BaseRetrievalMemory.live_settings | {
        "fusion", "rrf_k", "top_k", "member_fetch_k", "dedup"}

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self._member_log = LogOnce()
        self.members: list[Member] = self._load_members()
        self.primary: Member | None = self._choose_primary()

    def _settings_changed(self) -> None:
        super()._settings_changed()
        s = self.settings
        self.k = s.top_k or s.max_num_results
        self.fetch_k = s.member_fetch_k or max(2 * self.k, self.k)

    # -- the reference's attributes ----------------------------------------------------------
    @property
    def max_num_results(self) -> int:
        """Recalled items: the top-level key, else ``retrieval.max_num_results``."""
        return int(self.k)

    @max_num_results.setter
    def max_num_results(self, value: int) -> None:
        self.top_k = value  # the top-level key, checked and applied like any live setting

    @property
    def member_fetch_k(self) -> int:
        """Hits asked of each retriever before fusing."""
        return int(self.fetch_k)

    @member_fetch_k.setter
    def member_fetch_k(self, value: int) -> None:
        self._assign_setting("member_fetch_k", value)

    @property
    def retrievers(self) -> list[Member]:
        """The members with ``search()``, as ``(name, instance, weight)``."""
        return [m for m in self.members if m.is_retriever]

    @property
    def plain(self) -> list[Member]:
        """The members without ``search()`` (a summary, facts, a window)."""
        return [m for m in self.members if not m.is_retriever]

    # -- members ---------------------------------------------------------------------------
    def _load_members(self) -> list[Member]:
        specs = list(self.settings.members) or (list(HYBRID_PRESET) if self.settings.preset == "hybrid" else [])
        members: list[Member] = []
        for spec in specs:
            module, weight, config = _parse_member(spec)
            if module == COMPOSITE and not config.get("members"):
                self._member_log.error(f"self:{module}", "%s: a member cannot be the composite itself; skipped",
                                       self.plugin_name)
                continue
            memory = self._build_member(module, config)
            if memory is not None:
                repeat = sum(1 for m in members if m.module == module)
                members.append(Member(module if not repeat else f"{module}#{repeat + 1}", memory, weight))
        if not members:
            self._member_log.warning("none", "%s: no members loaded; acting as a passthrough", self.plugin_name)
        return members

    def _build_member(self, module: str, config: dict[str, Any]) -> Any:
        cls = load_memory_plugin(module)
        if cls is None:
            self._member_log.error(f"load:{module}", "%s: member %r is not installed; skipped", self.plugin_name,
                                   module)
            return None
        config = dict(config)
        config.setdefault("system_prompt", "")  # the composite's prompt is the one sent, once
        if _accepts(cls, "scope"):
            config.setdefault("scope", self.settings.scope)
        try:
            return cls(config=config)
        except Exception as exc:  # noqa: BLE001 - one broken member must not take the persona down
            self._member_log.error(f"load:{module}", "%s: member %r failed to start (%s); skipped",
                                   self.plugin_name, module, exc)
            return None

    def _choose_primary(self) -> Member | None:
        wanted = self.settings.primary
        if wanted:
            for member in self.members:
                if wanted in (member.name, member.module):
                    return member
            self._member_log.warning("primary", "%s: primary %r is not a loaded member; using the first",
                                     self.plugin_name, wanted)
        return self.members[0] if self.members else None

    def _call(self, member: Member, op: str, fn: Any, default: Any) -> Any:
        """``fn()``, or ``default`` when the member fails (logged once per member and op).

        On a turn, flush or close (``_SKIP_OPS``) nothing a member raises escapes: the input was
        validated here, so even a TypeError or ValueError is the member's own bug. Elsewhere
        (import, export, sessions, forget) those two and this package's errors (a member's store
        unreachable) still reach the caller, who asked for that operation and must learn it failed.
        """
        try:
            result = fn()
        except (TypeError, ValueError, MemoryPluginError) as exc:
            if op not in _SKIP_OPS:
                raise
            self._member_log.error(f"{op}:{member.name}", "%s: member %r %s failed: %s", self.plugin_name,
                                   member.name, op, exc)
            return default
        except Exception as exc:  # noqa: BLE001
            self._member_log.error(f"{op}:{member.name}", "%s: member %r %s failed (%s); skipped this turn",
                                   self.plugin_name, member.name, op, exc)
            return default
        self._member_log.clear(f"{op}:{member.name}", f"{self.plugin_name}: member {member.name!r} {op} works again")
        return result

    # -- the OPM contract --------------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        sid = check_session_id(session_id)
        if self.primary is None:
            return []
        return list(self._call(self.primary, "history", lambda: self.primary.memory.get_history(sid), []))

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        sid = check_session_id(session_id)
        messages = coerce_messages(new_messages)
        if not messages:
            return
        for member in self.members:
            self._call(member, "update", lambda m=member: m.memory.update_history(list(messages), sid), None)

    # -- retrieval -------------------------------------------------------------------------
    def search(self, query: str, session_id: str | None = None, top_k: int | None = None) -> list[MemoryHit]:
        """The fused, deduplicated hits of every retriever member."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        if session_id is not None:
            check_session_id(session_id)
        return self._fused(clean_text(query), session_id, (), top_k)

    def recall(self, query: str, session_id: str, window: Sequence[AgentMessage] = ()) -> list[MemoryHit]:
        """The fused hits for a turn, minus what is already verbatim in the window."""
        return self._fused(query, session_id, window)

    def store(self, text: str, session_id: str, metadata: dict[str, Any] | None = None) -> str | None:
        """Store a free-text document in every retriever member that stores; returns the first id."""
        sid = check_session_id(session_id)
        text = check_utterance(text)
        if not text:
            return None
        ids = [self._call(m, "store", lambda m=m: m.memory.store(text, sid, metadata), None)
               for m in self.retrievers if callable(getattr(m.memory, "store", None))]
        return next((i for i in ids if i), None)

    # The base's two hooks are never reached: writes and queries go through the members.
    def _store_document(self, doc_id: str, text: str, session_id: str, metadata: dict[str, Any]) -> None:
        raise NotImplementedError("CompositeMemory stores through its members")

    def _query_backend(self, query: str, top_k: int, session_id: str | None = None) -> list[MemoryHit]:
        return self._fused(query, session_id, (), top_k)

    def _fused(self, query: str, session_id: str | None, window: Sequence[AgentMessage],
               top_k: int | None = None) -> list[MemoryHit]:
        k = self.k if top_k is None else int(top_k)
        if k <= 0 or not query.strip():
            return []
        fetch_k = max(self.fetch_k, k)
        lists = []
        for member in self.members:
            if not member.is_retriever:
                continue
            hits = self._call(member, "search",
                              lambda m=member: m.memory.search(query, session_id, top_k=fetch_k), [])
            if self.settings.dedup_history and window:
                hits = drop_window_duplicates(hits, window)
            tagged = [dataclasses.replace(h, metadata={**h.metadata, "retriever": member.name}) for h in hits]
            lists.append((member.name, member.weight, tagged))
        fused = fuse(self.settings.fusion, lists, rrf_k=self.settings.rrf_k, dedup=self.settings.dedup)
        return self._above_min_score(fused)[:k]

    def _above_min_score(self, hits: list[MemoryHit]) -> list[MemoryHit]:
        floor = self.settings.min_score
        if floor is None:
            return hits
        # rrf and weighted rank by the fused score, so that is the scale min_score speaks.
        fused = self.settings.fusion in ("rrf", "weighted")
        return [h for h in hits if (h.metadata.get("fusion_score", 0.0) if fused else h.score) >= floor]

    def _extra_system(self, utterance: str, session_id: str) -> list[AgentMessage]:
        """The system blocks plain members add (a summary, facts), asked as cheaply as they allow."""
        blocks: list[AgentMessage] = []
        for member in self.members:
            if member.is_retriever:  # a plain primary's summary or facts count too
                continue
            blocks.extend(self._call(member, "context", lambda m=member: _added_blocks(m.memory, utterance,
                                                                                        session_id), []))
        return blocks

    # -- session2history: the primary's windows -----------------------------------------------
    def _stored_window(self, session_id: str) -> list[AgentMessage]:
        if self.primary is None:
            return []
        return list(self.primary.memory.get_history(check_session_id(session_id)))

    def _replace_window(self, session_id: str, messages: Iterable[Any]) -> list[AgentMessage]:
        view = getattr(self.primary.memory, "session2history", None) if self.primary is not None else None
        if view is None:
            raise TypeError(f"{self.plugin_name}: the primary member has no session2history to edit")
        view[check_session_id(session_id)] = list(messages)
        return self._stored_window(session_id)

    # -- health ------------------------------------------------------------------------------
    def degraded(self) -> dict[str, str]:
        """Every member's degradations (a member that cannot tell says nothing)."""
        out: dict[str, str] = {}
        for member in self.members:
            report = getattr(member.memory, "degraded", None)
            if callable(report):
                out.update(self._call(member, "degraded", lambda r=report: dict(r()), {}))
        return out

    # -- data ownership ----------------------------------------------------------------------
    def sessions(self) -> list[str]:
        found: set[str] = set()
        for member in self.members:
            found.update(self._call(member, "sessions", lambda m=member: list(m.memory.sessions()), [])
                         if hasattr(member.memory, "sessions") else [])
        return sorted(found)

    def forget(self, session_id: str) -> dict[str, Any]:
        """Forget in every member; a member that fails (its store unreachable) does not stop the
        others, and its error is raised once they are done: a forget is never reported whole when
        it was not."""
        sid = check_session_id(session_id)
        counts: dict[str, Any] = {}
        failure: Exception | None = None
        for m in self.members:
            if hasattr(m.memory, "forget"):
                try:
                    counts[m.name] = self._call(m, "forget", lambda m=m: m.memory.forget(sid), {})
                except Exception as exc:  # noqa: BLE001 - raised below, after the other members
                    failure = failure or exc
        if failure is not None:
            raise failure
        return counts

    def export(self, session_id: str) -> dict[str, Any]:
        sid = check_session_id(session_id)
        data: dict[str, Any] = {"plugin": self.plugin_name, "session_id": sid, "members": {}}
        for m in self.members:
            if hasattr(m.memory, "export"):
                data["members"][m.name] = self._call(m, "export", lambda m=m: m.memory.export(sid), {})
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        data, sid = session_export(data, session_id)
        exported = data.get("members") or {}
        if not isinstance(exported, Mapping):
            raise TypeError(f"the export's 'members' must be a dict of member exports, not {type(exported).__name__}")
        for m in self.members:
            if m.name in exported and hasattr(m.memory, "import_session"):
                self._call(m, "import", lambda m=m: m.memory.import_session(exported[m.name], sid), None)

    def flush(self, timeout: float | None = None) -> bool:
        results = [self._call(m, "flush", lambda m=m: m.memory.flush(timeout), False)
                   for m in self.members if hasattr(m.memory, "flush")]
        return all(r is not False for r in results)

    def close(self) -> None:
        if self._closed:
            return
        for m in self.members:
            if hasattr(m.memory, "close"):
                self._call(m, "close", m.memory.close, None)
        super().close()


def _parse_member(spec: Any) -> tuple[str, float, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, 1.0, {}
    weight = spec.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise ConfigError(f"member {spec.get('module')!r}: 'weight' must be a number, got {weight!r}")
    config = spec.get("config") or {}
    if not isinstance(config, Mapping):
        raise ConfigError(f"member {spec.get('module')!r}: 'config' must be a dict")
    return str(spec["module"]), float(weight), dict(config)


def _accepts(cls: type, key: str) -> bool:
    config_cls = getattr(cls, "Config", None)
    if config_cls is None or not dataclasses.is_dataclass(config_cls):
        return True  # a third-party plugin: push it, as the reference does
    return any(f.name == key or f.metadata.get("key") == key for f in dataclasses.fields(config_cls))


#: Operations where a failing member is logged and skipped whatever it raises: those of a turn
#: (it costs its part of the turn only), and flush/close (the other members still get theirs).
_SKIP_OPS = frozenset({"history", "update", "search", "context", "flush", "close"})


def load_memory_plugin(name: str) -> type | None:
    """The memory class registered as ``name``, or None: this package's entry points first, then
    ovos-plugin-manager's loader. Members are loaded through this name (patch it in tests)."""
    return load_memory_class(name)


def _added_blocks(memory: Any, utterance: str, session_id: str) -> list[AgentMessage]:
    blocks = getattr(memory, "context_blocks", None)
    if callable(blocks):
        return list(blocks(session_id))
    # A plugin without the cheap call: build its context and keep the system blocks it leads
    # with, minus its own system prompt (members are built with an empty one).
    own = (getattr(memory, "system_prompt", "") or "").strip()
    out = []
    for msg in memory.build_conversation_context(utterance, session_id):
        if not (is_role(msg, "system") or is_role(msg, "developer")):
            break
        if msg.content.strip() and msg.content.strip() != own:
            out.append(msg)
    return out
