"""``CompositeMemory``: several memories in one ``memory_module`` slot, fused into one context.

Members are any ``opm.agents.memory`` plugins. Those with ``search()`` are *retrievers*: their
hits are fused (rrf by default; score fusion, score_fusion.py, in the hybrid preset) into one
deduplicated ranked list. The others are *plain* members (a summary, facts, a window): they
contribute the system blocks they add. The *primary* member (default: the first) provides the
verbatim history. ``update_history`` writes through to every member. A member that fails to
load, or raises at run time, is skipped and logged once; the turn goes on without it. One
whose store does not answer at start joins later, when it does (``_memory/late_start.py``).

Differences from the reference, all deliberate: ``min_score`` applies after fusion (to the
fused score for rrf, weighted and score), ``search()`` returns the fused hits (so a composite
can be a member or a tool), plain members are asked only for their added blocks and never
duplicate a system prompt, recall already in the window is not injected again,
``max_context_tokens`` bounds the whole context (the blocks included) and ``max_added_tokens``
what is added besides the window, top-level LLM endpoint keys reach the members that take them,
and ``preset: "hybrid"`` gives the recommended members with score fusion.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from ._core.clock import said_at
from ._core.compat import AgentMessage
from ._core.loading import allows_value, load_memory_class, reads_key
from ._core.log import LOG, LogOnce
from ._core.paths import files_in, resolve_path
from ._core.worker import wakeups_deferred
from ._index.current import put_contradicted_last
from ._llm.endpoint import PERSONA_ENDPOINT_KEY
from ._memory.conversion import member_imports
from ._memory.exports import check_export, session_export
from ._memory.late_start import LateStarts, Waiting, store_unreachable
from ._memory.people import HOUSEHOLD_KEY, PERSON_PREFIX, inside, parse_people
from ._memory.plugin import HELD_ITEMS
from ._memory.session_view import SessionHistoryMixin
from ._memory.waiting import no_waiting
from .common import MemoryHit
from .config import as_spelt, option
from .context import ContextMemory, ContextParts, RecallConfig, RecallingMemory
from .errors import ConfigError, MemoryPluginError, NotSupported, StorageError, StoreUnavailable
from .fusion import FUSION_MODES, fuse, highest_fused_score, hit_key
from .messages import check_session_id, check_utterance, clean_text, context_window, is_role
from .retrieval import BaseRetrievalMemory, drop_window_duplicates
from .score_fusion import KINDS, ScoreWeights, Signal, carries_signal, features, fused_scores
from .storage.documents import past_exchanges

__all__ = ["COMPOSITE_FUSIONS", "CompositeConfig", "CompositeMemory", "ENDPOINT_KEYS", "HYBRID_PRESET", "Member"]

COMPOSITE = "ovos-memory-plugin-composite"
#: The reference's five fusions, and score fusion (score_fusion.py), the hybrid preset's.
COMPOSITE_FUSIONS = (*FUSION_MODES, "score")
#: LLM endpoint keys given at the top level reach every member that takes them (and sets none).
ENDPOINT_KEYS = ("api_url", "model", "api_key", "request_timeout")

#: The keys of a member entry.
MEMBER_KEYS = ("module", "weight", "config")
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
    {"module": "ovos-memory-plugin-entity", "config": {"db_path": "hybrid_entity.json",
                                                       "context_facts": "relevant"}},
)


def member_name(module: str, earlier: Iterable[str]) -> str:
    """A member's name: its module, with ``#2``, ``#3``... for a module already among ``earlier``."""
    repeat = sum(1 for name in earlier if name.split("#", 1)[0] == module)
    return module if not repeat else f"{module}#{repeat + 1}"


#: The hybrid preset's recall header: short (the reference's costs 136 characters on every turn),
#: and it says which of two disagreeing sources is newer.
PRESET_HEADER = "Recalled earlier exchanges (the facts above are newer):"
#: ... in user mode, where it opens the user turn and the facts follow it.
PRESET_USER_HEADER = "Known facts, then recalled earlier exchanges (the facts are newer):"
#: What ``max_added_tokens`` the hybrid preset defaults to: 460 with the reference's header, less
#: the 18 tokens the shorter header saves, so recall keeps the same room; on LoCoMo dev the facts,
#: headers and recalled exchanges a turn adds then average under 1,500 characters
#: (docs/backends/composite.md).
PRESET_ADDED_TOKENS = 442
#: The preset's defaults for the composite's own keys (a key the config sets wins).
PRESET_SETTINGS: dict[str, Any] = {"fusion": "score", "max_added_tokens": PRESET_ADDED_TOKENS}
#: The preset's ``context`` keys (a key the config's ``context`` sets wins): a recalled exchange
#: from an earlier day shows that day, so the model can tell it from newer facts.
PRESET_CONTEXT: dict[str, Any] = {"show_dates": "older", "header": PRESET_HEADER}
#: The preset's ``retrieval`` keys (a key the config's ``retrieval`` sets wins): a follow-up
#: ("and where does she live?") is searched with the user's turn it leans on.
PRESET_RETRIEVAL: dict[str, Any] = {"query_mode": "follow-up"}


@dataclasses.dataclass(frozen=True)
class CompositeConfig(RecallConfig):
    max_history: int = option(10, "accepted for configs written for the reference; the window is the primary "
                              "member's (set max_history in its config)", minimum=0)
    db_url: str | None = option(None, "PostgreSQL URL given to every member that takes one (and sets none): one "
                                "database, one transaction per exchange", kind=str)
    members: list[Any] = option([], 'members: {"module", "weight", "config"} dicts or bare entry-point names')
    preset: str | None = option(None, "hybrid: recency + lexical + local-rag + entity when members is empty",
                                kind=str, choices=("hybrid",))
    primary: str | None = option(None, "member whose history is the verbatim window; null: the first", kind=str)
    data_dir: str | None = option(None, "folder of the members' files (their default files and relative db_paths): "
                                  "one of its own per persona; null: the XDG data folder", kind=str)
    fusion: str = option("rrf", "how retriever hits are fused; the hybrid preset: score (see score_fusion.py)",
                         choices=COMPOSITE_FUSIONS)
    fusion_weights: dict[str, Any] = option({}, "score fusion weights (keyword, semantic, date, length) over "
                                            "the fitted defaults")
    rrf_k: float = option(60, "rrf constant k (0: 1/rank)", kind=float, minimum=0)
    top_k: int | None = option(None, "recalled items (top level; falls back to retrieval.max_num_results)",
                               key="max_num_results", kind=int, minimum=1)
    member_fetch_k: int | None = option(None, "hits asked of each retriever (never fewer than "
                                        "max_num_results); 0 or null: 2 x max_num_results",
                                        kind=int, minimum=0)
    dedup: bool = option(True, "fuse identical texts from several retrievers into one")
    max_added_tokens: int | None = option(None, "token budget for what is added besides the window: the plain "
                                          "members' blocks (facts, summary), then recall; null: unbounded; "
                                          f"the hybrid preset: {PRESET_ADDED_TOKENS}", kind=int, minimum=1)
    api_url: str | None = option(None, "LLM endpoint for the members that call one (entity, longterm, redis) and "
                                 "set none; absent: each member's default; null or empty: no model", kind=str)
    model: str | None = option(None, "model name for those members; absent: each member's default", kind=str)
    api_key: str | None = option(None, "bearer token for those members; absent: each member's default", kind=str)
    request_timeout: float | None = option(None, "seconds an LLM request of those members may take; absent: "
                                           "each member's default", kind=float, minimum=0.1)

    def __post_init__(self) -> None:
        super().__post_init__()
        ScoreWeights.from_config(self.fusion_weights)  # a bad weight fails at construction
        if self.data_dir is not None:
            folder = resolve_path(self.data_dir, folder=True)
            if os.path.exists(folder) and not os.path.isdir(folder):
                raise ConfigError(f"'data_dir' {self.data_dir!r} is not a folder ({folder} exists and is a file)")
        for i, spec in enumerate(self.members):
            if not isinstance(spec, (str, Mapping)) or (isinstance(spec, Mapping) and not spec.get("module")):
                raise ConfigError(f"'members[{i}]' must be an entry-point name or a dict with a 'module' key")
            if isinstance(spec, Mapping):
                _check_member(i, spec)
                if getattr(self, "scope", None) == "person":
                    _refuse_own_mapping(i, spec, getattr(self, "people", None) or {})

    @staticmethod
    def unknown_inner_keys(raw: Mapping[str, Any]) -> list[str]:
        """Messages naming each unknown key of a member entry (a typo there silently dropped the
        member's weight or config), as the top level's unknown keys are named."""
        members = raw.get("members")
        problems = []
        for i, spec in enumerate(members if isinstance(members, list) else []):
            for key in spec if isinstance(spec, Mapping) else ():
                if key not in MEMBER_KEYS:
                    close = difflib.get_close_matches(str(key), MEMBER_KEYS, n=1)
                    hint = f"; did you mean 'members[{i}].{close[0]}'?" if close else ""
                    problems.append(f"unknown config key 'members[{i}].{key}'{hint}")
        return problems


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


class CompositeMemory(SessionHistoryMixin, RecallingMemory):
    """Fuses its members; see the module docstring.

    Example::

        CompositeMemory({"members": ["ovos-memory-plugin-recency",
                                     {"module": "ovos-memory-plugin-lexical", "weight": 1.0}],
                         "fusion": "rrf", "max_num_results": 5})
    """

    Config: ClassVar[type] = CompositeConfig
    plugin_name: ClassVar[str] = COMPOSITE
    own_attributes: ClassVar[frozenset[str]] = frozenset({"members", "primary"})
    # Not its scope: the members were built with it (and with its people), and store and recall by
    # their own; a composite saying "session" while its members still shared everything leaked.
    live_settings: ClassVar[frozenset[str]] = (RecallingMemory.live_settings - {"scope"}) | {
        "fusion", "fusion_weights", "rrf_k", "top_k", "member_fetch_k", "dedup"}
    # The reference's retrieval base, which its composite is, sends the system prompt as configured.
    strips_system_prompt: ClassVar[bool] = False
    #: Its members wait for their stores inside it (``_build_member``), and its own window holds
    #: what none of them could store.
    waits_for_store: ClassVar[bool] = False

    def __init__(self, config: Mapping[str, Any] | None = None):
        self._edit_lock = threading.RLock()  # session2history edits: read, change, write as one
        super().__init__(config)
        if self.settings.preset and self.settings.members:
            LOG.warning(f"{self.plugin_name}: 'preset' {self.settings.preset!r} is not used, as 'members' is given "
                        "(leave 'members' out for the preset's)")
        if self._preset_applies():  # the preset's defaults, under what the config sets
            preset = {k: v for k, v in PRESET_SETTINGS.items() if k not in self.config}
            for block, defaults in (("context", PRESET_CONTEXT), ("retrieval", PRESET_RETRIEVAL)):
                given = self.config.get(block) if isinstance(self.config.get(block), Mapping) else {}
                preset.update({k: v for k, v in defaults.items() if k not in given})
            if preset.get("header") and self.settings.inject_mode == "user":
                preset["header"] = PRESET_USER_HEADER
            object.__setattr__(self, "settings", dataclasses.replace(self.settings, **preset))
            self._settings_changed()
        self._member_log = LogOnce()
        self._log = LogOnce()  # the shared PostgreSQL transaction refused: the exchange is held here
        #: What works less well than configured because of a member, by part (see degraded()):
        #: one that did not start, and one whose last call of an operation failed.
        self._member_faults: dict[str, str] = {}
        self._failed: dict[str, str] = {}  # member name -> why it failed to start (for good)
        self._roster = threading.RLock()  # members joining late (see _memory/late_start.py)
        self._order: dict[str, int] = {}  # member name -> its place among the configured members
        self._late = LateStarts(self.plugin_name, self._roster, self._start_waiting, self._replay_late,
                                self._join_late, self._late_gave_up, self._write_all_held, HELD_ITEMS)
        self.members: list[Member] = self._load_members()
        self.primary: Member | None = self._choose_primary()
        self._warn_unreachable_min_score()
        self._late.start()

    def _warn_unreachable_min_score(self) -> None:
        """A ``min_score`` copied from a member's scale (local-rag's 0..1 cosine) keeps no fused
        hit: rrf scores stay near 1/61 a member. Said once, as the turn would say nothing."""
        s = self.settings
        weights = [float(w) for _, w, _ in (_parse_member(spec) for spec in s.members)]
        ceiling = highest_fused_score(s.fusion, weights, s.rrf_k) if weights else None
        if s.min_score is not None and ceiling is not None and s.min_score > ceiling:
            LOG.warning(f"{self.plugin_name}: 'retrieval.min_score' {s.min_score} applies to the fused {s.fusion} "
                        f"score, which is at most {ceiling:.3g} here: nothing will be recalled (set a member's "
                        "own min_score to filter on its scale)")

    def _settings_changed(self) -> None:
        super()._settings_changed()
        s = self.settings
        self.k = s.top_k or s.max_num_results
        # Never fewer hits asked of a member than are recalled: max(member_fetch_k, max_num_results).
        self.fetch_k = max(s.member_fetch_k or 2 * self.k, self.k)
        self.score_weights = ScoreWeights.from_config(s.fusion_weights, f"{self.plugin_name}: fusion_weights")

    def _preset_applies(self) -> bool:
        return self.settings.preset == "hybrid" and not self.settings.members

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
        specs = list(self.settings.members) or (list(HYBRID_PRESET) if self._preset_applies() else [])
        members: list[Member] = []
        for position, spec in enumerate(specs):
            module, weight, config = _parse_member(spec)
            if module == COMPOSITE and not (config.get("members") or config.get("preset")):
                # With neither, it would be one more composite with no members, forwarding nothing.
                self._member_log.error(f"self:{module}", "%s: a composite member needs members or a preset; "
                                       "skipped", self.plugin_name)
                self._member_faults[module] = "a composite member needs 'members' or 'preset'; skipped"
                continue
            name = member_name(module, self._order)
            memory = self._build_member(Waiting(position, name, module, weight, config))
            if memory is not None and self._shares_a_store(module, memory, members):
                memory.close()
            elif memory is not None:
                self._order[name] = position
                members.append(Member(name, memory, weight))
        if not members and not self._late.waiting:
            self._member_log.warning("none", "%s: no members loaded; acting as a passthrough", self.plugin_name)
            self._member_faults[self.plugin_name] = "no members loaded: nothing is remembered"
        return members

    def _people_of(self, settings: Any) -> Any:
        """The composite hands its members a person's key (``person:alice``), never the household's:
        each member folds it into ``household:`` by its own ``household`` (the top level's unless
        it says otherwise), so a member that keeps its own per person does."""
        people = super()._people_of(settings)
        return None if people is None else dataclasses.replace(people, household=False)

    def memory_key(self, session_id: str) -> str:
        """The key ``session_id``'s memory is listed under: its person's where a member keeps it
        (``person:alice``), else the household's when the people share one (every member folded
        the person's key into it)."""
        key = super().memory_key(session_id)
        if self.settings.household and key.startswith(PERSON_PREFIX) and key not in self.sessions():
            return HOUSEHOLD_KEY
        return key

    def _build_member(self, spec: Waiting) -> Any:
        """The member's memory; None when it did not start (said once, and by ``degraded()``):
        for good, or until its store answers (it then joins the others, see ``_join_late``)."""
        try:
            return self._new_member(spec)
        except Exception as exc:  # noqa: BLE001 - one broken member must not take the persona down
            if not store_unreachable(exc):
                self._late_gave_up(spec, exc)
                return None
            self._order[spec.name] = spec.position
            self._member_log.error(f"load:{spec.name}", "%s: member %r cannot reach its store (%s); it starts when "
                                   "the store answers", self.plugin_name, spec.name, exc)
            self._member_faults[spec.name] = f"waiting for its store ({exc}); it starts when the store answers"
            self._late.add(spec)
            return None

    def _new_member(self, spec: Waiting) -> Any:
        """A new instance of the member ``spec`` names; None when its plugin is not installed."""
        module = spec.module
        cls = load_memory_plugin(module)
        if cls is None:
            self._member_log.error(f"load:{module}", "%s: member %r is not installed; skipped", self.plugin_name,
                                   module)
            self._member_faults[module] = "not installed; skipped"
            return None
        config = dict(spec.config)
        config.setdefault("system_prompt", "")  # the composite's prompt is the one sent, once
        if reads_key(cls, "scope") and allows_value(cls, "scope", self.settings.scope):
            config.setdefault("scope", self.settings.scope)
        if self.settings.scope == "person":  # one mapping of sessions to people for every member
            for key in ("people", "household"):
                if key in self.config and reads_key(cls, key, third_party=False):
                    config.setdefault(key, self.config[key])
        if self.settings.db_url is not None and reads_key(cls, "db_url", third_party=False):
            config.setdefault("db_url", self.settings.db_url)  # one PostgreSQL database for every member
        for key in ENDPOINT_KEYS:  # given at the top level: one endpoint for every member that calls one
            if key in self.config and reads_key(cls, key, third_party=False):
                config.setdefault(key, self.config[key])
        if PERSONA_ENDPOINT_KEY in self.config and reads_key(cls, "api_url", third_party=False):
            config.setdefault(PERSONA_ENDPOINT_KEY, self.config[PERSONA_ENDPOINT_KEY])  # the persona's chat endpoint
        # A member whose store does not answer waits here (LateStarts), not in itself.
        with no_waiting(), files_in(self.settings.data_dir):
            return cls(config=config)

    def _start_waiting(self, spec: Waiting) -> Any:
        """A waiting member's memory, tried again; None when it would share an earlier member's
        store (checked before it is given what it missed: that would be stored twice)."""
        memory = self._new_member(spec)
        if memory is not None and self._shares_a_store(spec.module, memory, self.members):
            memory.close()
            self._member_faults.pop(spec.name, None)  # the sharing says why, under its own name
            return None
        return memory

    def _late_gave_up(self, spec: Waiting, exc: BaseException) -> None:
        self._member_log.clear(f"load:{spec.name}")  # it waited: this is news, said too
        self._member_log.error(f"load:{spec.name}", "%s: member %r failed to start (%s); skipped",
                               self.plugin_name, spec.name, exc)
        self._member_faults[spec.name] = f"failed to start ({exc}); skipped"
        self._failed[spec.name] = f"{type(exc).__name__}: {exc}"

    @staticmethod
    def _replay_late(memory: Any, session_id: str, batch: list[Any], ts: float) -> None:
        """An update a member missed while it waited, stored with the time the others stored it
        (``session_id`` the key the others got: in person scope a person's, which a member takes
        from the package only)."""
        with inside(), said_at(ts):
            memory.update_history(list(batch), session_id)

    def _join_late(self, spec: Waiting, memory: Any) -> None:
        """``memory``, started late, joins the members in its configured place (under the roster
        lock: no update falls between what it was given and what it now gets)."""
        joined = sorted([*self.members, Member(spec.name, memory, spec.weight)], key=lambda m: self._order[m.name])
        self.members = joined  # a new list: a turn in flight goes on with the one it read
        self.primary = self._choose_primary()
        self._member_faults.pop(spec.name, None)
        self._failed.pop(spec.name, None)
        self._member_faults.pop(self.plugin_name, None)  # "no members loaded"
        self._member_log.clear(f"load:{spec.name}", f"{self.plugin_name}: member {spec.name!r} reached its store "
                               "and started")

    def waiting_members(self) -> list[str]:
        """The members (and members of a member composite) still waiting for their store."""
        names = self._late.names()
        for m in self.members:
            inner = getattr(m.memory, "waiting_members", None)
            names += [f"{m.name}/{name}" for name in inner()] if callable(inner) else []
        return names

    def not_started(self) -> dict[str, str]:
        """The members that are not running, and why: waiting for their store, or failed to start
        (their stores may hold sessions that :meth:`sessions` cannot list)."""
        out = {name: "waiting for its store" for name in self.waiting_members()}
        out.update((name, f"failed to start ({why})") for name, why in list(self._failed.items()))
        return out

    def _not_started_reasons(self) -> str:
        # A copy: a member waiting for its store may give up meanwhile (the late-start thread).
        return "; ".join(f"{name} failed to start ({why})" for name, why in list(self._failed.items()))

    def _require_whole(self, what: str) -> None:
        """Before an export or an import: every member running. One that failed to start still
        holds its store, which an export would miss (a backup, or a move, without its part)."""
        self._require_started(what)
        if self._failed:
            raise StorageError(f"{self.plugin_name}: {self._not_started_reasons()}; nothing was {what}: mend it (or "
                               "take it out of 'members') and try again")

    def _say_unreached(self, counts: dict[str, Any]) -> dict[str, Any]:
        """``counts`` of a forget every running member did; raised as a :class:`StorageError` if a
        member failed to start: its store may still hold what was forgotten elsewhere."""
        if self._failed:
            done = ", ".join(counts) or "no member"
            raise StorageError(f"{self.plugin_name}: forgotten by {done} but not by {self._not_started_reasons()}: "
                               "its store may still hold it; mend it and forget again to finish")
        return counts

    def _require_started(self, what: str) -> None:
        """Before a change of stored memory other than a turn: a member that waits for its store
        would miss it (a forget it never hears of would leave the session there)."""
        names = self.waiting_members()
        if names:
            raise StoreUnavailable(f"{self.plugin_name}: {', '.join(names)} cannot reach its store yet; nothing was "
                                   f"{what}: try again once it answers (see degraded())")

    def _shares_a_store(self, module: str, memory: Any, members: list[Member]) -> bool:
        """True (logged, and reported by ``degraded()``) when ``memory`` would write the rows an
        earlier member writes: every exchange would be stored twice, and forget would race itself."""
        claim = getattr(memory, "store_claim", None)
        if claim is None:  # in RAM, or a third-party memory that does not say
            return False
        earlier = next((m for m in members if claim.overlaps(getattr(m.memory, "store_claim", None))), None)
        if earlier is None:
            return False
        self._member_log.error(f"shared:{module}", "%s: member %r would write the store of member %r (%s); skipped: "
                               "give it a db_path (or table) of its own", self.plugin_name, module, earlier.name,
                               claim.location)
        self._member_faults[f"{module} (second)"] = f"shares {claim.location} with {earlier.name}; skipped"
        return True

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
        """``fn()``; on a turn, flush or close (``_SKIP_OPS``) a failing member gives ``default``
        (logged once per member and operation) and the others go on. Elsewhere (import, export,
        sessions, forget) whatever it raises reaches the caller, who asked for that operation and
        must learn it failed."""
        try:
            result = fn()
        except Exception as exc:
            if op not in _SKIP_OPS:
                raise
            self._member_log.error(f"{op}:{member.name}", "%s: member %r %s failed (%s: %s); skipped", self.plugin_name,
                                   member.name, op, type(exc).__name__, exc)
            self._member_faults[f"{member.name}:{op}"] = f"{op} failed ({type(exc).__name__}: {exc}); skipped"
            return default
        if self._member_faults:
            self._member_faults.pop(f"{member.name}:{op}", None)
        self._member_log.clear(f"{op}:{member.name}", f"{self.plugin_name}: member {member.name!r} {op} works again")
        return result

    # -- the OPM contract --------------------------------------------------------------------
    def get_history(self, session_id: str) -> list[AgentMessage]:
        sid = check_session_id(session_id)
        primary = self.primary
        if primary is None:
            return []
        return list(self._call(primary, "history", lambda: primary.memory.get_history(sid), []))

    def _incoming(self, new_messages: Any, session_id: str) -> list[AgentMessage]:
        messages = super()._incoming(new_messages, session_id)
        self._refuse_reserved(session_id)
        return messages

    def _refuse_reserved(self, session_id: str) -> None:
        """A session id a member keeps for itself (entity's ``__global__``) is refused before any
        member stores: stored by the others, it was a session no export could take whole."""
        for m in self.members:
            if session_id in self._reserved_by(m):
                raise ValueError(f"{self.plugin_name}: session id {session_id!r} is reserved by the member "
                                 f"{m.name!r}; choose another session id")

    @staticmethod
    def _reserved_by(member: Member) -> frozenset[str]:
        return getattr(member.memory, "reserved_session_ids", frozenset())

    def update_history(self, new_messages: list[AgentMessage], session_id: str) -> None:
        messages = self._incoming(new_messages, session_id)
        if messages:
            self._write_update(session_id, messages)

    def _store_batch(self, session_id: str, batch: list[Any]) -> None:
        """Every member's update. Each member holds what its own store refuses; with a ``db_url``
        the members share one transaction, and when that cannot even begin (the database is
        down) the whole batch is held here (raised to :meth:`_write_update`) and given to every
        member later. When its commit fails after the members wrote (the connection died in the
        instant between), each member holds again what it wrote in it."""
        if not self._late.waiting:
            self._store_members(session_id, batch)
            return
        with self._roster:  # what the members store, the members still waiting get too
            self._store_members(session_id, batch)
            self._late.record(session_id, batch)

    def _store_members(self, session_id: str, batch: list[Any]) -> None:
        begun, written = False, []
        try:
            # Every member writes, then their background work (indexing, extraction) starts:
            # woken one by one, it would compete with the members still writing.
            with wakeups_deferred(), self._one_transaction():
                begun = True
                for member in self.members:
                    written.append((member, self._member_update(member, session_id, batch)))
        except MemoryPluginError as exc:
            if not begun:
                raise
            for member, stored in written:
                if stored:  # only this package's members sharing the transaction record anything
                    member.memory._hold_uncommitted(stored, exc)
            return

    def _member_update(self, member: Member, session_id: str, batch: list[Any]) -> list[Any]:
        """``member``'s update of ``batch``; what it stored in the shared transaction (none: a
        member on another store, Redis or a database of its own, commits its own writes)."""
        db_url = self.settings.db_url
        shares = db_url is not None and getattr(getattr(member.memory, "settings", None), "db_url", None) == db_url
        recording = getattr(member.memory, "_recording_writes", None) if shares else None
        with recording() if recording is not None else contextlib.nullcontext([]) as stored:
            self._call(member, "update", lambda: member.memory.update_history(list(batch), session_id), None)
        return stored

    @contextlib.contextmanager
    def _one_transaction(self) -> Iterator[None]:
        """With a ``db_url``, the members' writes share one PostgreSQL transaction: one commit (one
        disk flush) for the whole exchange, and every member has it or none (a member that fails
        rolls back only its own part). Otherwise each member commits on its own."""
        if self.settings.db_url is None:
            yield
            return
        from .storage.postgres import open_pg_database, release_pg_database

        db = open_pg_database(self.settings.db_url)  # the members' own (shared in the process)
        try:
            with db.atomic():
                yield
        finally:
            release_pg_database(db)

    # -- retrieval -------------------------------------------------------------------------
    def search(self, query: str, session_id: str | None = None, top_k: int | None = None) -> list[MemoryHit]:
        """The fused, deduplicated hits of every retriever member."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        if session_id is not None:
            check_session_id(session_id)
        return self._fused(clean_text(query), session_id, (), top_k, credit=True)

    def recall(self, query: str, session_id: str, window: Sequence[AgentMessage] = ()) -> list[MemoryHit]:
        """The fused hits for a turn, minus what is already verbatim in the window."""
        return self._fused(query, session_id, window)

    def turn_recall(self, query: str, session_id: str, window: Sequence[AgentMessage],
                    blocks: Sequence[AgentMessage]) -> list[MemoryHit]:
        """:meth:`recall`, with the exchanges the facts sent in ``blocks`` contradict moved behind
        the others (_index/current.py): ranked from the wider pool, so others take their place."""
        hits = self._fused(query, session_id, window, self.fetch_k)
        return put_contradicted_last(hits, [b.content for b in blocks])[:self.k]

    def store(self, text: str, session_id: str, metadata: dict[str, Any] | None = None) -> str | None:
        """Store a free-text document in every retriever member that stores; returns the first id."""
        sid = check_session_id(session_id)
        self._refuse_reserved(sid)
        text = check_utterance(text)
        if not text:
            return None
        self._require_started("stored")
        ids = [self._call(m, "store", lambda m=m: m.memory.store(text, sid, metadata), None)
               for m in self.retrievers if callable(getattr(m.memory, "store", None))]
        return next((i for i in ids if i), None)

    def _fused(self, query: str, session_id: str | None, window: Sequence[AgentMessage],
               top_k: int | None = None, credit: bool = False) -> list[MemoryHit]:
        """The fused hits; with ``credit``, each naming every member that recalled it (for those
        who read the hits, ``search``: a turn's context never shows it)."""
        k = self.k if top_k is None else int(top_k)
        if k <= 0 or not query.strip():
            return []
        found = self._gather(query, session_id, window, max(self.fetch_k, k))
        if self.settings.fusion == "score":
            fused = self._score_fused(query, session_id, found)
        else:
            lists = [(member.name, member.weight, hits) for member, hits in found]
            fused = fuse(self.settings.fusion, lists, rrf_k=self.settings.rrf_k, dedup=self.settings.dedup)
        top = self._above_min_score(fused)[:k]
        return _found_by(top, found) if credit else top

    def _gather(self, query: str, session_id: str | None, window: Sequence[AgentMessage],
                fetch_k: int) -> list[tuple[Member, list[MemoryHit]]]:
        """Each retriever's hits (tagged with its name), minus what the window already holds."""
        found: list[tuple[Member, list[MemoryHit]]] = []
        for member in self.members:
            if not member.is_retriever:
                continue
            hits = self._call(member, "search",
                              lambda m=member: m.memory.search(query, session_id, top_k=fetch_k), [])
            if self.settings.dedup_history and window:
                hits = drop_window_duplicates(hits, window)
            tagged = [dataclasses.replace(h, metadata={**h.metadata, "retriever": member.module}) for h in hits]
            found.append((member, tagged))
        return found

    def fusion_candidates(self, query: str, session_id: str | None = None) -> tuple[list[MemoryHit], list[Signal]]:
        """What score fusion ranks for ``query``: the candidates and every retriever's scores of
        them (see :meth:`_candidates`), for tools that study it (benchmarks/fit_fusion.py)."""
        query = clean_text(query)
        return self._candidates(query, session_id, self._gather(query, session_id, (), self.fetch_k))

    def _candidates(self, query: str, session_id: str | None,
                    found: Sequence[tuple[Member, list[MemoryHit]]]) -> tuple[list[MemoryHit], list[Signal]]:
        """Every retriever's hits, one per text, in member order, and each retriever's scores of
        all of them: its own hits' scores, and what its ``score_candidates`` says of the others'
        (a retriever without that method scores only its own)."""
        candidates: dict[str, MemoryHit] = {}
        for _member, hits in found:
            for hit in hits:
                candidates.setdefault(hit_key(hit), hit)
        keys = list(candidates)
        signals = []
        for member, hits in found:
            own: dict[str, float | None] = {}
            for hit in hits:
                # An exchange matched by its words while it waits for the index carries the share
                # of the query's words it holds: no cosine or BM25, so this retriever leaves it unscored.
                own.setdefault(hit_key(hit), None if hit.metadata.get("pending") else hit.score)
            others = [candidates[key] for key in keys if key not in own]
            scorer = getattr(member.memory, "score_candidates", None)
            cross: Sequence[float | None] = [None] * len(others)
            if others and callable(scorer):
                cross = self._call(member, "score", lambda s=scorer, o=others: list(s(query, o, session_id)), cross)
            scored = dict(zip((hit_key(h) for h in others), cross))
            kind = getattr(member.memory, "score_kind", None)
            signals.append(Signal(kind if kind in KINDS else "semantic", member.weight,
                                  [own[key] if key in own else scored.get(key) for key in keys]))
        return [candidates[key] for key in keys], signals

    def _score_fused(self, query: str, session_id: str | None,
                     found: Sequence[tuple[Member, list[MemoryHit]]]) -> list[MemoryHit]:
        hits, signals = self._candidates(query, session_id, found)
        times = [_timestamp(h) for h in hits]
        rows = features(signals, [h.content for h in hits], times, query)
        scores = fused_scores(rows, self.score_weights)
        kept = [i for i, row in enumerate(rows) if carries_signal(row)]
        order = sorted(kept, key=lambda i: -scores[i])  # stable: ties keep member order
        return [dataclasses.replace(hits[i], metadata={**hits[i].metadata, "fusion_score": scores[i]})
                for i in order]

    def _above_min_score(self, hits: list[MemoryHit]) -> list[MemoryHit]:
        floor = self.settings.min_score
        if floor is None:
            return hits
        # rrf, weighted and score rank by the fused score, so that is the scale min_score speaks.
        fused = self.settings.fusion in ("rrf", "weighted", "score")
        return [h for h in hits if (h.metadata.get("fusion_score", 0.0) if fused else h.score) >= floor]

    def context_parts(self, utterance: str, session_id: str, *, window: bool = True,
                      blocks: bool = True) -> ContextParts:
        """The primary's window, and the blocks the plain members add (a summary, facts), each
        member asked only for what it gives: a member failing costs its part only.

        The window comes first: this package's members that choose their blocks by the turn
        (entity's relevant facts) are asked with the query recall searches, so that a follow-up
        ("Where does she live?") gets the facts about whom it leans on, as it gets the exchanges.
        Another package's member is asked with the utterance, as a persona would ask it."""
        parts = ContextParts()
        members, primary = self.members, self.primary  # one roster for the turn (a member may join meanwhile)
        own = None  # the primary's window, and its blocks for the utterance: one call, as most turns need
        if window and primary is not None:
            own = self._member_parts(primary, utterance, session_id, window=True,
                                     blocks=blocks and not primary.is_retriever)
            if own is not None:
                parts.window, parts.history = own.window, own.query_history()
        parts.query = self.build_query(utterance, parts.query_history())  # recall searches it too
        for member in members:
            if not blocks or member.is_retriever:  # a plain primary's summary or facts count too
                continue
            asked = parts.query if isinstance(member.memory, ContextMemory) else utterance
            if member is primary and window and asked == utterance:
                got = own
            else:
                got = self._member_parts(member, asked, session_id, window=False, blocks=True)
            parts.blocks.extend(got.blocks if got is not None else [])
        parts.blocks = distinct_blocks(parts.blocks)
        return parts

    def _member_parts(self, member: Member, query: str, session_id: str, window: bool,
                      blocks: bool) -> ContextParts | None:
        return self._call(member, "context", lambda: member_parts(member.memory, query, session_id, window, blocks),
                          None)

    # -- session2history: the primary's windows -----------------------------------------------
    def _stored_window(self, session_id: str) -> list[AgentMessage]:
        if self.primary is None:
            return []
        return list(self.primary.memory.get_history(check_session_id(session_id)))

    def _replace_window(self, session_id: str, messages: Iterable[Any]) -> list[AgentMessage]:
        self._require_started("changed")
        view = getattr(self.primary.memory, "session2history", None) if self.primary is not None else None
        if view is None:
            raise TypeError(f"{self.plugin_name}: the primary member has no session2history to edit")
        view[check_session_id(session_id)] = list(messages)
        return self._stored_window(session_id)

    # -- health ------------------------------------------------------------------------------
    def degraded(self) -> dict[str, str]:
        """Every member's degradations (a member that cannot tell says nothing), a member that did
        not start, and a member operation whose last call failed."""
        out: dict[str, str] = dict(self._member_faults)
        out.update(self._log.failing(self.plugin_name))
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
        return self._listed(found)

    def forget(self, session_id: str) -> dict[str, Any]:
        """Forget in every member; a member that fails (its store unreachable) does not stop the
        others, and its error is raised once they are done: a forget is never reported whole when
        it was not."""
        sid = check_session_id(session_id)
        self._require_started("forgotten")
        self._held.drop(sid)  # first: what the database refused is never stored now
        counts: dict[str, Any] = {}
        failed: tuple[str, Exception] | None = None  # the first member that could not forget
        with self._one_transaction():  # on PostgreSQL every member forgets in one transaction
            for m in self.members:
                if hasattr(m.memory, "forget") and sid not in self._reserved_by(m):
                    try:
                        counts[m.name] = self._call(m, "forget", lambda m=m: m.memory.forget(sid), {})
                    except Exception as exc:  # noqa: BLE001 - raised below, after the others committed
                        failed = failed or (m.name, exc)
        if failed is not None:
            name, failure = failed
            if counts and isinstance(failure, MemoryPluginError):  # say it is half done, and how to finish
                raise type(failure)(f"forgotten by {', '.join(counts)} but not by {name} ({failure}); "
                                    "forget it again to finish") from failure
            raise failure
        self._say_unreached(counts)
        return counts

    def export(self, session_id: str) -> dict[str, Any]:
        sid = check_session_id(session_id)
        self._require_whole("exported")  # a backup, or a move, without it would lose its part
        self._write_held(sid)
        data: dict[str, Any] = {"plugin": self.plugin_name, "session_id": sid, "members": {}}
        for m in self.members:
            if hasattr(m.memory, "export") and sid not in self._reserved_by(m):  # none of it is that session's
                data["members"][m.name] = self._call(m, "export", lambda m=m: m.memory.export(sid), {})
        return data

    def import_session(self, data: Mapping[str, Any], session_id: str | None = None) -> None:
        data, sid = session_export(data, session_id)
        self._refuse_reserved(sid)
        self._require_whole("imported")
        # Each member its own export, or the parts of another backend's it keeps (_memory/conversion.py).
        exported = member_imports(data, [(m.name, m.memory) for m in self.members
                                         if hasattr(m.memory, "import_session")], self.plugin_name)
        check_export({"members": exported})  # every member's part checked before any is stored
        for m in self.members:
            if m.name in exported and hasattr(m.memory, "import_session"):
                self._call(m, "import", lambda m=m: m.memory.import_session(exported[m.name], sid), None)

    def import_exchanges(self, session_id: str, exchanges: Sequence[Mapping[str, Any]]) -> int:
        """Past exchanges with their times (see :meth:`BaseRetrievalMemory.import_exchanges`), into
        every member: dated where the member takes them, as turns (``update_history``) where it
        cannot (a window, the facts). Returns how many were given; nothing is stored if one is
        malformed."""
        sid = check_session_id(session_id)
        self._refuse_reserved(sid)
        items = [e.as_dict() for e in past_exchanges(exchanges)]
        self._require_whole("imported")
        for m in self.members:
            if callable(getattr(m.memory, "import_exchanges", None)):
                self._call(m, "import", lambda m=m: m.memory.import_exchanges(sid, items), None)
            else:
                self._call(m, "import", lambda m=m: _replay(m.memory, sid, items), None)
        return len(items)

    def flush(self, timeout: float | None = None) -> bool:
        self._late.try_now(timeout)
        held = self._write_all_held() and not self._late.kept()
        results = [self._call(m, "flush", lambda m=m: m.memory.flush(timeout), False)
                   for m in self.members if hasattr(m.memory, "flush")]
        return held and all(r is not False for r in results)

    def close(self) -> None:
        if self._closed:
            return
        self._late.close()
        self._close_held()
        for m in self.members:
            if hasattr(m.memory, "close"):
                self._call(m, "close", m.memory.close, None)
        super().close()

    # -- one item at a time (what a person sees and removes: ``ovos-memory serve``) ---------------
    def document(self, session_id: str, doc_id: str) -> dict[str, Any] | None:
        """The stored document ``doc_id`` of the first member holding one by that id, or None."""
        sid = check_session_id(session_id)
        for m in self.members:
            if callable(getattr(m.memory, "document", None)):
                found = self._call(m, "document", lambda m=m: m.memory.document(sid, doc_id), None)
                if found is not None:
                    return found  # type: ignore[no-any-return]
        return None

    def forget_document(self, session_id: str, doc_id: str) -> dict[str, Any]:
        """Forget the stored exchange ``doc_id`` (as :meth:`document` finds it) in every member."""
        doc = self.document(session_id, doc_id)
        return self.forget_exchange(session_id, doc["content"]) if doc is not None else {}

    def forget_exchange(self, session_id: str, content: str) -> dict[str, Any]:
        """Forget the exchange stored as ``content`` in every member that keeps it (documents,
        index entries, window messages; see :meth:`BaseRetrievalMemory.forget_exchange`); what
        each member deleted, by member. A member that fails does not stop the others, and its
        error is raised once they are done. A member that keeps the session but cannot forget one
        exchange (it keeps whole sessions only) is a :class:`NotSupported` before anything is
        forgotten: the exchange would live on there while the call reported it gone."""
        session_id = check_session_id(session_id)
        unable = [m.name for m in self.members
                  if not callable(getattr(m.memory, "forget_exchange", None)) and _keeps(m, session_id)]
        if unable:
            raise NotSupported(f"{self.plugin_name}: {', '.join(unable)} keep(s) session {session_id!r} but cannot "
                               "forget one exchange; nothing was forgotten: forget the whole session instead")
        self._require_started("forgotten")
        self._require_held_written(session_id)
        return self._say_unreached(self._fan_out("forget_exchange", session_id, content))

    def forget_fact(self, session_id: str, text: str) -> dict[str, Any]:
        """Forget the fact ``text`` in every member that keeps facts (entity, a summary's facts);
        how many each deleted, by member. Failures as in :meth:`forget_exchange`."""
        session_id = check_session_id(session_id)
        self._require_started("forgotten")
        return self._say_unreached(self._fan_out("forget_fact", session_id, text))

    def index_backlog(self) -> int:
        """The documents every member's index still waits for."""
        return sum(int(self._call(m, "backlog", lambda m=m: m.memory.index_backlog(), 0) or 0)
                   for m in self.members if callable(getattr(m.memory, "index_backlog", None)))

    def _fan_out(self, op: str, session_id: str, item: str) -> dict[str, Any]:
        counts: dict[str, Any] = {}
        failure: Exception | None = None
        for m in self.members:
            if callable(getattr(m.memory, op, None)):
                try:
                    counts[m.name] = self._call(m, op, lambda m=m: getattr(m.memory, op)(session_id, item), {})
                except Exception as exc:  # noqa: BLE001 - raised below, after the others committed
                    failure = failure or exc
        if failure is not None:
            raise failure
        return counts


def _keeps(member: Any, session_id: str) -> bool:
    """Whether ``member`` holds anything of ``session_id`` (a member that cannot list its sessions
    is taken to hold it: saying "forgotten" must never be a guess)."""
    sessions = getattr(member.memory, "sessions", None)
    if not callable(sessions):
        return True
    try:
        return session_id in sessions()
    except Exception:  # noqa: BLE001 - cannot tell: as above
        return True


def distinct_blocks(blocks: Sequence[AgentMessage]) -> list[AgentMessage]:
    """The blocks with what an earlier block already says left out: a block sent twice, and a
    block's lines that an earlier block holds (the same fact in entity's facts and in a summary's
    facts); a block left with its first line (its header) only is dropped. Sent once, the budget
    left goes to recall."""
    out: list[AgentMessage] = []
    seen: set[str] = set()
    for block in blocks:
        first, *rest = block.content.split("\n")
        fresh = [line for line in rest if not line.strip() or line.strip() not in seen]
        if block.content in (b.content for b in out) or (rest and not any(line.strip() for line in fresh)):
            continue
        seen.update(line.strip() for line in rest if line.strip())
        out.append(block if len(fresh) == len(rest) else dataclasses.replace(
            block, content="\n".join([first, *fresh])))
    return out


def _replay(memory: Any, session_id: str, items: Sequence[Mapping[str, Any]]) -> None:
    """Past exchanges as turns, for a member that cannot take their times."""
    for exchange in past_exchanges(items):
        memory.update_history(exchange.messages(), session_id)


def _found_by(hits: list[MemoryHit], found: Sequence[tuple[Member, list[MemoryHit]]]) -> list[MemoryHit]:
    """Each hit with ``metadata["retrievers"]``: the module of every member that recalled its text,
    in member order (``"retriever"`` names one of them, the copy kept)."""
    keys = [(member.module, {hit_key(h) for h in member_hits}) for member, member_hits in found]
    return [dataclasses.replace(h, metadata={**h.metadata, "retrievers": list(dict.fromkeys(
        n for n, ks in keys if hit_key(h) in ks))}) for h in hits]


def _timestamp(hit: MemoryHit) -> float | None:
    ts = hit.metadata.get("ts")
    return float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None


#: Weights are relative; past this a sum of weighted scores could overflow to infinity.
MAX_WEIGHT = 1e6


def _check_member(i: int, spec: Mapping[str, Any]) -> None:
    """A member's weight (a number from 0 to MAX_WEIGHT: a fused score must stay a number) and config."""
    weight = spec.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= MAX_WEIGHT:
        raise ConfigError(f"'members[{i}].weight' must be a number from 0 to {MAX_WEIGHT:,.0f}, got {weight!r}")
    if not isinstance(spec.get("config") or {}, Mapping):
        raise ConfigError(f"'members[{i}].config' must be a dict, not {type(spec.get('config')).__name__}")


def _refuse_own_mapping(i: int, spec: Mapping[str, Any], people: Any) -> None:
    """In ``scope: person`` the composite maps each session to its person's key and hands every
    member that key: a member's own ``scope: session`` or ``people`` would be ignored, and a member
    meant to keep each device's window apart would share it. Refused, naming the fix, rather than
    leaking what one device heard to another (a member's own ``household`` works, and so does
    ``scope: global``, a member that recalls from every session)."""
    config, where = spec.get("config") or {}, f"'members[{i}]' ({spec['module']})"
    scope = config.get("scope", "person")
    if scope is None or as_spelt(scope) == "session":  # as the member reads it: null is its default
        given = "null" if scope is None else repr(scope)  # as the persona file writes it
        raise ConfigError(f"{where} has scope {given}, but a composite in scope 'person' hands every member the "
                          "person's memory; give that member a persona of its own, or drop its 'scope'")
    if "people" in config and parse_people(config["people"]) != parse_people(people):
        raise ConfigError(f"{where} has its own 'people', but a composite in scope 'person' maps every session with "
                          "the top level's 'people'; set them there (a member's own 'household' is kept)")


def _parse_member(spec: Any) -> tuple[str, float, dict[str, Any]]:
    """``(module, weight, config)`` of a member spec the config checked (``_check_member``)."""
    if isinstance(spec, str):
        return spec, 1.0, {}
    return str(spec["module"]), float(spec.get("weight", 1.0)), dict(spec.get("config") or {})


#: Operations where a failing member is logged and skipped whatever it raises: those of a turn
#: (it costs its part of the turn only), and flush/close (the other members still get theirs).
_SKIP_OPS = frozenset({"history", "update", "search", "score", "context", "flush", "close"})


def load_memory_plugin(name: str) -> type | None:
    """The memory class registered as ``name``, or None: this package's entry points first, then
    ovos-plugin-manager's loader. Members are loaded through this name (patch it in tests)."""
    return load_memory_class(name)


def member_parts(memory: Any, utterance: str, session_id: str, window: bool, blocks: bool) -> ContextParts:
    """A member's parts of a turn: through the pipeline for this package's memories; for another
    plugin, its history, and the system blocks it leads its own context with (minus its own
    system prompt: members are built with an empty one)."""
    if isinstance(memory, ContextMemory):
        return memory.context_parts(utterance, session_id, window=window, blocks=blocks)
    history = list(memory.get_history(session_id)) if window else []
    return ContextParts(context_window(history), _leading_blocks(memory, utterance, session_id) if blocks else [],
                        history)


def _leading_blocks(memory: Any, utterance: str, session_id: str) -> list[AgentMessage]:
    blocks = getattr(memory, "context_blocks", None)
    if callable(blocks):
        return list(blocks(session_id))
    own = (getattr(memory, "system_prompt", "") or "").strip()
    out = []
    for msg in memory.build_conversation_context(utterance, session_id):
        if not (is_role(msg, "system") or is_role(msg, "developer")):
            break
        if msg.content.strip() and msg.content.strip() != own:
            out.append(msg)
    return out


# A composite is what the reference made it, a retrieval memory, to isinstance() and issubclass(), without
# being a document store: its window and documents are its members'.
BaseRetrievalMemory.register(CompositeMemory)
