"""Recall on the LoCoMo dev split: does a memory's ``search`` find the turns that answer a question?

Usable as a library::

    from locomo import evaluate
    report = evaluate(lambda: LexicalMemory({"db_path": ":memory:"}), ks=(5, 10))
    report["overall"][5]["recall"]

and as a command::

    python benchmarks/locomo.py --backend lexical [--embedder e5|minilm] [--quick] [--json out.json] [--dated]

Protocol (the *live* one, the default: the path a persona takes):

- One fresh memory per conversation (``factory()``; a factory that takes one argument gets the
  conversation's session id as a hint) and one session id per conversation.
- Sessions are fed in order through ``update_history``, one call per exchange: speaker_a is the
  USER, speaker_b the ASSISTANT. Consecutive turns of the same speaker are joined with a newline
  into one message (LoCoMo dev has none inside a session, but the full set may). A session that
  opens with speaker_b (about a third do) starts with an answer that has no question in that
  session: it is sent alone, ``update_history([assistant])``. A trailing speaker_a turn with no
  answer is sent alone, ``update_history([user])``.
- Stored live: each exchange is stored when its ``update_history`` call is made, with the time
  the store's clock gives it then (the run's clock: the whole conversation lands within minutes),
  as a persona stores it.
- Dated (the second, labelled protocol; ``--dated``): a memory with ``import_exchanges`` (this
  package's retrieval memories and composite) gets the same exchanges through it instead, each
  with its session's date (``session_<n>_date_time``, read as UTC) plus one second per exchange,
  as a user restoring an old conversation would import it. The pairing is ``update_history``'s
  for exchanges said at those times: a session opening with speaker_b, a day or more after the
  last answer, pairs with no question, where fed live (seconds after that answer) it continues
  it and pairs with its question. A memory without the method
  (the reference package) is fed turn by turn as above.
- ``memory.flush()`` is called when it exists (backends that embed in the background).
- Each question is asked as a turn (``build_conversation_context``, for a memory that has it):
  *added* is everything the turn's message list holds besides the verbatim window and the final
  user turn (the system and developer messages: recalled exchanges, facts, summaries, their
  headers and bullets), counted in characters; *in context* (the primary number) is whether the
  text of an evidence turn is in it.
- For every question of the chosen categories (1 multi-hop, 2 temporal, 3 open-domain,
  4 single-hop; 5 adversarial has no answer): ``memory.search(question, session_id, top_k=k)``
  for each k. A question is recalled at k when the text of any of its evidence turns is contained
  in the concatenated contents of the hits. Both sides are compared with whitespace collapsed, so
  a backend that joins or strips lines still counts.
- Reported per category, per conversation and overall: recall@k, mean recalled characters (sum of
  the hits' content lengths per question: the price in prompt size of that recall) and search
  latency median/p90.
- Standard retrieval metrics, comparable with published offline results, from
  ``search(question, session_id, top_k=10)``: turn-level hit@1/5/10 (an evidence turn inside one
  of the top k hits, each hit on its own) and session-level Hit@1 and NDCG@5 (the sessions of the
  hits, in the order they first appear, against the sessions holding evidence; a hit belongs to
  every session one of whose turns it holds).

This module imports nothing from ``ovos_memory_plugins`` (only ``ovos_plugin_manager`` for the
message type), so the side-by-side runner can run it unchanged against the reference package in
its own virtual environment.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import inspect
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo" / "locomo-dev.json"
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_WS = re.compile(r"\s+")
#: The standard retrieval metrics (published LoCoMo retrieval results report these).
STANDARD_METRICS = ("turn_hit@1", "turn_hit@5", "turn_hit@10", "session_hit@1", "session_ndcg@5")


class BackendUnavailable(RuntimeError):
    """The requested backend cannot be built here (not written yet, or a dependency is missing)."""


# -- data ----------------------------------------------------------------------------------------
def locate_dataset(path: str | Path | None = None) -> Path:
    """The LoCoMo file: ``path``, else $LOCOMO_PATH, else the shared data folder next to the repo."""
    for candidate in (path, os.environ.get("LOCOMO_PATH"), DEFAULT_PATH,
                      Path.cwd() / "data" / "locomo" / "locomo-dev.json"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError(f"locomo-dev.json not found (tried {path or DEFAULT_PATH}); set LOCOMO_PATH")


def load_conversations(path: str | Path | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    data = json.loads(locate_dataset(path).read_text(encoding="utf-8"))
    return data[:limit] if limit else data


def sessions(conversation: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The sessions of one conversation in order (``session_<n>`` keys with turns; dates skipped)."""
    conv = conversation["conversation"]
    keys = [k for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]]
    return [conv[k] for k in sorted(keys, key=lambda k: int(k.split("_")[1]))]


def exchanges(conversation: dict[str, Any]) -> Iterator[list[tuple[str, str]]]:
    """The ``update_history`` calls for one conversation, as lists of ``(role, text)``.

    Pairing rules are in the module docstring: runs of one speaker are joined with a newline; a
    speaker_a run followed by a speaker_b run is one exchange; anything unpaired is sent alone.
    """
    user_speaker = conversation["conversation"]["speaker_a"]
    for turns in sessions(conversation):
        runs: list[tuple[str, list[str]]] = []
        for turn in turns:
            role = "user" if turn["speaker"] == user_speaker else "assistant"
            if runs and runs[-1][0] == role:
                runs[-1][1].append(turn["text"])
            else:
                runs.append((role, [turn["text"]]))
        i = 0
        while i < len(runs):
            role, texts = runs[i]
            if role == "user" and i + 1 < len(runs):
                yield [("user", "\n".join(texts)), ("assistant", "\n".join(runs[i + 1][1]))]
                i += 2
            else:
                yield [(role, "\n".join(texts))]
                i += 1


_LOCOMO_DATE = re.compile(r"\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.I)
_MONTHS = {m: i + 1 for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july",
                                           "august", "september", "october", "november", "december"))}


def session_time(text: str) -> float | None:
    """``"1:56 pm on 8 May, 2023"`` as POSIX seconds (read as UTC), or None."""
    m = _LOCOMO_DATE.match(text or "")
    if not m or m.group(5).lower() not in _MONTHS:
        return None
    hour, minute, half, day, month, year = m.groups()
    hour24 = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    when = datetime.datetime(int(year), _MONTHS[month.lower()], int(day), hour24, int(minute),
                             tzinfo=datetime.timezone.utc)
    return when.timestamp()


def dated_exchanges(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """The exchanges ``update_history`` would store for the calls of :func:`exchanges`, as
    ``{"question", "answer", "ts"}``: a question waits for its answer across calls (a session
    opening with speaker_b answers the last session's unanswered question), a question followed
    by another question is stored alone, and a question never answered is not stored. ``ts`` is
    the date of the session whose call stores it, plus one second per exchange (order kept)."""
    conv = conversation["conversation"]
    keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]), key=lambda k: int(k[8:]))
    out: list[dict[str, Any]] = []
    question: str | None = None
    for key in keys:
        first = len(out)
        one = {"sample_id": "", "conversation": {"speaker_a": conv["speaker_a"], key: conv[key]}}
        for call in exchanges(one):
            answered = False
            for role, text in call:
                if role == "user":
                    if question is not None and not answered:
                        out.append({"question": question, "answer": None})
                    question, answered = text, False
                else:
                    out.append({"question": question, "answer": text})
                    answered = True
            if answered:
                question = None  # a lone answer a day later has no question (update_history's rule)
        start = session_time(conv.get(f"{key}_date_time", ""))
        for i, item in enumerate(out[first:]):
            item["ts"] = None if start is None else start + i
    return out


def evidence_ids(raw: Sequence[str]) -> list[str]:
    """Evidence ids, with malformed entries like ``"D8:6; D9:17"`` split on ``;`` and spaces."""
    return [part for item in raw for part in re.split(r"[;\s]+", str(item)) if part]


def questions(conversation: dict[str, Any], categories: Sequence[int]) -> list[dict[str, Any]]:
    """Questions of ``categories`` with their evidence texts and the numbers of the sessions
    holding them (evidence ids that exist only)."""
    turns = {t["dia_id"]: t["text"] for s in sessions(conversation) for t in s}
    out = []
    for qa in conversation["qa"]:
        if qa.get("category") not in categories:
            continue
        ids = [e for e in evidence_ids(qa.get("evidence", [])) if e in turns]
        if ids:
            out.append({"question": qa["question"], "category": qa["category"], "evidence": [turns[e] for e in ids],
                        "sessions": sorted({_session_number(e) for e in ids})})
    return out


def _session_number(dia_id: str) -> int:
    """``"D12:3"`` -> 12."""
    return int(dia_id[1:].split(":", 1)[0])


def turn_sessions(conversation: dict[str, Any]) -> list[tuple[str, int]]:
    """Every turn's text (whitespace collapsed) with its session number, for mapping hits to sessions."""
    conv = conversation["conversation"]
    keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]), key=lambda k: int(k[8:]))
    return [(_squash(t["text"]), int(k[8:])) for k in keys for t in conv[k] if _squash(t["text"])]


def standard_metrics(hits: Sequence[str], wanted: Sequence[str], sessions_wanted: Sequence[int],
                     turns: Sequence[tuple[str, int]]) -> dict[str, float]:
    """Turn-level hit@1/5/10 and session-level Hit@1 and NDCG@5 of ranked hit texts (see the
    module docstring). ``wanted``: the evidence texts, whitespace collapsed."""
    squashed = [_squash(h) for h in hits]
    holds = [any(w in h for w in wanted) for h in squashed]
    out = {f"turn_hit@{k}": float(any(holds[:k])) for k in (1, 5, 10)}
    ranked: list[int] = []
    for i, hit in enumerate(squashed):
        found = [n for text, n in turns if text in hit]
        if i == 0:
            out["session_hit@1"] = float(bool(set(found) & set(sessions_wanted)))
        ranked += [n for n in dict.fromkeys(found) if n not in ranked]
    out.setdefault("session_hit@1", 0.0)
    gains = [1.0 / math.log2(i + 2) for i in range(5)]
    dcg = sum(g for g, n in zip(gains, ranked[:5]) if n in sessions_wanted)
    ideal = sum(gains[:min(5, len(sessions_wanted))])
    out["session_ndcg@5"] = dcg / ideal if ideal else 0.0
    return out


# -- one memory ----------------------------------------------------------------------------------
def _message(role: str, text: str) -> Any:
    from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

    return AgentMessage(MessageRole.USER if role == "user" else MessageRole.ASSISTANT, text)


def _content(hit: Any) -> str:
    if isinstance(hit, str):
        return hit
    if isinstance(hit, dict):
        return str(hit.get("content", ""))
    if isinstance(hit, (tuple, list)) and hit:  # legacy (content, source, score) tuples
        return str(hit[0])
    return str(getattr(hit, "content", ""))


def _squash(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _make(factory: Callable[..., Any], hint: str) -> Any:
    """``factory(hint)`` when the factory takes an argument, else ``factory()``."""
    try:
        params = [p for p in inspect.signature(factory).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):  # builtins and some callables have no signature
        params = []
    return factory(hint) if params else factory()


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _feed(memory: Any, conversation: dict[str, Any], session_id: str, dated: bool = False) -> tuple[int, float]:
    calls, start = 0, time.perf_counter()
    if dated and callable(getattr(memory, "import_exchanges", None)):
        items = dated_exchanges(conversation)
        memory.import_exchanges(session_id, [{k: v for k, v in e.items() if v is not None} for e in items])
        calls = len(items)
    else:
        for exchange in exchanges(conversation):
            memory.update_history([_message(role, text) for role, text in exchange], session_id)
            calls += 1
    if callable(getattr(memory, "flush", None)):
        memory.flush()
    return calls, time.perf_counter() - start


def _added(memory: Any, question: str, session_id: str) -> tuple[str, int, int]:
    """What a turn asking ``question`` adds besides the verbatim window and the final user turn
    (its system and developer messages: recalled exchanges, facts, summaries, with their headers
    and bullets): its text, its characters less the recall header, and all its characters."""
    context = memory.build_conversation_context(question, session_id)
    added = [m.content or "" for m in context[:-1]
             if getattr(m.role, "value", m.role) in ("system", "developer")]
    header = getattr(memory, "header", None) or ""
    total = sum(map(len, added))
    headers = sum(len(header) for b in added if header and b.startswith(header))
    return "\n".join(added), total - headers, total


def evaluate_conversation(memory: Any, conversation: dict[str, Any], ks: Sequence[int],
                          categories: Sequence[int], session_id: str, dated: bool = False,
                          context: bool | None = None) -> dict[str, Any]:
    """Feed one conversation into ``memory`` and return one row per (question, k). ``context``
    None: ask each question as a turn when the memory can build one."""
    if not callable(getattr(memory, "search", None)):
        raise BackendUnavailable(f"{type(memory).__name__} has no search(): recall cannot be measured")
    if context is None:
        context = callable(getattr(memory, "build_conversation_context", None))
    calls, ingest_s = _feed(memory, conversation, session_id, dated)
    rows = []
    name = str(conversation.get("sample_id", session_id))
    turns = turn_sessions(conversation)
    for number, qa in enumerate(questions(conversation, categories)):
        wanted = [_squash(e) for e in qa["evidence"]]
        extra: dict[str, Any] = {"question": f"{name}:{number}"}
        if context:
            text, chars, total = _added(memory, qa["question"], session_id)
            extra.update(added_chars=chars, added_total_chars=total,
                         in_context=any(w in _squash(text) for w in wanted))
        top = [_content(h) for h in memory.search(qa["question"], session_id, top_k=10) or []]
        extra.update(standard_metrics(top, wanted, qa["sessions"], turns))
        for k in ks:
            start = time.perf_counter()
            hits = memory.search(qa["question"], session_id, top_k=k) or []
            latency = time.perf_counter() - start
            contents = [_content(h) for h in hits]
            joined = _squash("\n".join(contents))
            rows.append({"category": qa["category"], "conversation": name, "k": k,
                         "hit": any(w in joined for w in wanted), "chars": sum(len(c) for c in contents),
                         "latency_s": latency, **extra})
    return {"rows": rows, "exchanges": calls, "ingest_s": ingest_s}


def summarise(rows: list[dict[str, Any]], ks: Sequence[int]) -> dict[str, Any]:
    """``{"overall": {k: stats}, "by_category": {cat: {k: stats}}}`` from per-question rows."""
    def stats(subset: list[dict[str, Any]]) -> dict[str, float]:
        lat = [r["latency_s"] * 1000 for r in subset]
        n = len(subset)
        out = {"n": n,
               "recall": sum(r["hit"] for r in subset) / n if n else float("nan"),
               "mean_chars": sum(r["chars"] for r in subset) / n if n else float("nan"),
               "latency_ms_median": statistics.median(lat) if lat else float("nan"),
               "latency_ms_p90": _percentile(lat, 0.9)}
        for key in ("added_chars", "added_total_chars", "in_context", *STANDARD_METRICS):
            if n and all(key in r for r in subset):
                out[key] = sum(r[key] for r in subset) / n
        return out

    cats = sorted({r["category"] for r in rows})
    convs = sorted({r["conversation"] for r in rows if "conversation" in r})
    return {"overall": {k: stats([r for r in rows if r["k"] == k]) for k in ks},
            "by_category": {c: {k: stats([r for r in rows if r["k"] == k and r["category"] == c]) for k in ks}
                            for c in cats},
            "by_conversation": {c: {k: stats([r for r in rows if r["k"] == k and r.get("conversation") == c])
                                    for k in ks} for c in convs}}


def evaluate(factory: Callable[..., Any], ks: Sequence[int] = (5, 10), limit_conversations: int | None = None,
             categories: Sequence[int] = (1, 2, 3, 4), path: str | Path | None = None,
             conversations: list[dict[str, Any]] | None = None,
             progress: Callable[[str], None] | None = None, dated: bool = False,
             context: bool | None = None) -> dict[str, Any]:
    """Recall of the memories built by ``factory`` on LoCoMo (see the module docstring).

    Returns ``{"overall": {k: {n, recall, mean_chars, latency_ms_median, latency_ms_p90}},
    "by_category": {category: {k: ...}}, "conversations": n, "exchanges": n, "ingest_s": s}``.
    """
    convs = conversations if conversations is not None else load_conversations(path, limit_conversations)
    if conversations is not None and limit_conversations:
        convs = convs[:limit_conversations]
    rows: list[dict[str, Any]] = []
    total_calls, total_ingest = 0, 0.0
    for conv in convs:
        sid = f"locomo-{conv.get('sample_id', len(rows))}"
        memory = _make(factory, sid)
        try:
            result = evaluate_conversation(memory, conv, ks, categories, sid, dated, context)
        finally:
            if callable(getattr(memory, "close", None)):
                memory.close()
        rows += result["rows"]
        total_calls += result["exchanges"]
        total_ingest += result["ingest_s"]
        if progress:
            progress(f"{sid}: {result['exchanges']} exchanges in {result['ingest_s']:.1f} s")
    report = summarise(rows, ks)
    report.update(conversations=len(convs), exchanges=total_calls, ingest_s=total_ingest, ks=list(ks), rows=rows)
    return report


# -- backends for the command line ---------------------------------------------------------------
EMBEDDERS = {"e5": "ovos-memory-e5-embeddings-plugin", "minilm": "ovos-memory-minilm-embeddings-plugin"}
VECTOR_DB = "ovos-memory-sqlite-embeddings-plugin"


def load_plugin(entry_point: str) -> type:
    """The class behind an ``opm.agents.memory`` entry point, or BackendUnavailable saying why."""
    try:
        from ovos_plugin_manager.agents import load_memory_plugin
    except ImportError as exc:
        raise BackendUnavailable(f"ovos-plugin-manager cannot load memory plugins here: {exc}") from exc
    with contextlib.redirect_stderr(sys.stderr):
        cls = load_memory_plugin(entry_point)
    if cls is None:
        raise BackendUnavailable(f"{entry_point} did not load (not written yet, or it failed to import; "
                                 f"see the warning above)")
    return cls


def backend_config(backend: str, folder: Path, embedder: str = "e5") -> tuple[str, dict[str, Any]]:
    """``(entry point, config)`` for a named benchmark backend whose files live in ``folder``."""
    rag = {"db_path": str(folder / "rag.db"), "embeddings_plugin": EMBEDDERS[embedder],
           "embeddings_db_plugin": VECTOR_DB, "embeddings_db_config": {"path": str(folder / "vectors.db")}}
    lexical = {"db_path": str(folder / "lexical.db")}
    # The hybrid preset's retrievers (ovos_memory_plugins.composite.HYBRID_PRESET, not imported:
    # this module also runs against the reference package): each exchange indexed with its neighbours.
    neighbours = {"retrieval": {"neighbour_weight": 0.5}}
    member = "ovos-memory-plugin-"
    configs = {
        "lexical": (member + "lexical", lexical),
        "local-rag": (member + "local-rag", rag),
        "lexical-neighbours": (member + "lexical", {**lexical, **neighbours}),
        "local-rag-neighbours": (member + "local-rag", {**rag, **neighbours}),
        # The preset's settings (composite.PRESET_SETTINGS; a test keeps the two in step).
        "composite-hybrid": (member + "composite", {"members": [
            {"module": member + "recency", "config": {"db_path": str(folder / "recency.db")}},
            {"module": member + "lexical", "config": {**lexical, **neighbours}},
            {"module": member + "local-rag", "config": {**rag, **neighbours}},
            {"module": member + "entity", "config": {"db_path": str(folder / "entity.json"),
                                                     "context_facts": "relevant"}}],
            "fusion": "score", "max_added_tokens": 442,
            "context": {"show_dates": "older", "header": "Recalled earlier exchanges (the facts above are newer):"},
            "retrieval": {"query_mode": "follow-up"}}),
        # The preset's two retrievers and score fusion, nothing else.
        "composite-fusion": (member + "composite", {"members": [
            {"module": member + "lexical", "config": {**lexical, **neighbours}},
            {"module": member + "local-rag", "config": {**rag, **neighbours}}], "fusion": "score"}),
        "composite-plain": (member + "composite", {"members": [
            {"module": member + "lexical", "config": lexical},
            {"module": member + "local-rag", "config": rag}], "fusion": "rrf"}),
        "composite-lexical": (member + "composite", {"members": [
            {"module": member + "recency", "config": {}},
            {"module": member + "lexical", "config": lexical}]}),
    }
    # Leave one conversation out: the preset with weights fitted without the conversation it is
    # scored on (their overrides come from fit_fusion.py --folds: locomo.py --fold-weights, run.py).
    configs["composite-hybrid-loco"] = configs["composite-hybrid"]
    for fusion in ("rrf", "weighted"):  # the preset's members with the rank fusions
        configs[f"composite-hybrid-{fusion}"] = (configs["composite-hybrid"][0],
                                                 {**configs["composite-hybrid"][1], "fusion": fusion})
    if backend not in configs:
        raise BackendUnavailable(f"unknown backend {backend!r}; choose from {', '.join(configs)}")
    return configs[backend]


def backend_factory(backend: str, embedder: str = "e5", workdir: str | Path | None = None,
                    overrides: dict[str, dict[str, Any]] | None = None) -> Callable[[str], Any]:
    """A factory building a fresh ``backend`` memory per conversation, each in its own folder.

    ``overrides``: config keys per conversation (sample id, e.g. ``"conv-26"``), such as the
    ``fusion_weights`` fitted without that conversation (``--fold-weights``)."""
    entry_point, _ = backend_config(backend, Path("."), embedder)
    cls = load_plugin(entry_point)
    root = Path(workdir or tempfile.mkdtemp(prefix="locomo-"))

    def make(session_hint: str) -> Any:
        folder = root / session_hint
        folder.mkdir(parents=True, exist_ok=True)
        config = backend_config(backend, folder, embedder)[1]
        return cls({**config, **(overrides or {}).get(session_hint.removeprefix("locomo-"), {})})

    return make


def format_table(report: dict[str, Any], title: str = "") -> str:
    ks = report["ks"]
    head = ["category", "n"] + [f"R@{k}" for k in ks] + [f"chars@{k}" for k in ks] + \
        [f"ms@{k} med/p90" for k in ks]
    lines = [title] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(name: str, per_k: dict[Any, dict[str, float]]) -> str:
        def get(k: int) -> dict[str, float]:  # int keys in memory, str keys after a JSON round trip
            return per_k[k] if k in per_k else per_k[str(k)]

        first = get(ks[0])
        cells = [name, str(first["n"])] + [f"{get(k)['recall']:.3f}" for k in ks] + \
            [f"{get(k)['mean_chars']:.0f}" for k in ks] + \
            [f"{get(k)['latency_ms_median']:.2f} / {get(k)['latency_ms_p90']:.2f}" for k in ks]
        return "| " + " | ".join(cells) + " |"

    for cat, per_k in sorted(report["by_category"].items(), key=lambda kv: int(kv[0])):
        lines.append(row(f"{cat} {CATEGORY_NAMES.get(int(cat), '')}", per_k))
    for conv, per_k in sorted(report.get("by_conversation", {}).items()):
        lines.append(row(conv, per_k))
    lines.append(row("**all**", report["overall"]))
    first = report["overall"].get(ks[0]) or report["overall"].get(str(ks[0])) or {}
    if "added_chars" in first:
        lines.append(f"\nAsked as turns: the context adds {first['added_total_chars']:.0f} characters on average "
                     f"(recalled exchanges, facts, summaries, headers and bullets) and holds an evidence turn for "
                     f"{first['in_context']:.3f} of the questions.")
    if "turn_hit@5" in first:
        lines.append("Standard metrics (top 10 hits of search): " + ", ".join(
            f"{name} {first[name]:.3f}" for name in STANDARD_METRICS) + ".")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="lexical",
                        help="lexical, local-rag, lexical-neighbours, local-rag-neighbours, composite-hybrid "
                             "(the hybrid preset: recency + lexical + local-rag with neighbours + entity, score "
                             "fusion), composite-hybrid-rrf and composite-hybrid-weighted (the same members with "
                             "rank fusions), "
                             "composite-plain (lexical + local-rag, rrf), composite-lexical")
    parser.add_argument("--embedder", default="e5", choices=sorted(EMBEDDERS))
    parser.add_argument("--quick", action="store_true", help="one conversation only")
    parser.add_argument("--limit", type=int, default=None, help="number of conversations")
    parser.add_argument("--ks", default="5,10", help="comma-separated top-k values")
    parser.add_argument("--data", default=None, help="path to locomo-dev.json")
    parser.add_argument("--json", default=None, help="also write the report as JSON here")
    parser.add_argument("--dated", action="store_true",
                        help="the second protocol: import the exchanges with their sessions' dates where the "
                             "memory has import_exchanges (default: live, turn by turn through update_history)")
    parser.add_argument("--no-context", action="store_true",
                        help="do not ask the questions as turns (search only)")
    parser.add_argument("--fold-weights", default=None,
                        help="JSON {conversation: {weight: value}} from benchmarks/fit_fusion.py --folds: each "
                             "conversation is scored with the fusion_weights fitted without it (leave one out)")
    args = parser.parse_args(argv)
    ks = tuple(int(k) for k in args.ks.split(","))
    limit = 1 if args.quick else args.limit
    overrides = None
    if args.fold_weights:
        folds = json.loads(Path(args.fold_weights).read_text(encoding="utf-8"))
        overrides = {conv: {"fusion_weights": weights} for conv, weights in folds.items()}
    try:
        with tempfile.TemporaryDirectory(prefix="locomo-") as workdir:
            # Anything left at a default path lands here, never in the user's real memory.
            os.environ["XDG_DATA_HOME"] = os.path.join(workdir, "xdg")
            factory = backend_factory(args.backend, args.embedder, workdir, overrides)
            report = evaluate(factory, ks=ks, limit_conversations=limit, path=args.data,
                              progress=lambda m: print(m, file=sys.stderr), dated=args.dated,
                              context=False if args.no_context else None)
    except BackendUnavailable as exc:
        print(f"backend {args.backend!r} is not available: {exc}", file=sys.stderr)
        return 2
    embeds = "rag" in args.backend or args.backend.startswith("composite-")
    label = args.backend + (f" ({args.embedder})" if embeds else "") + (", dated import" if args.dated else ", live")
    print(format_table(report, f"LoCoMo dev recall, {label}, {report['conversations']} conversation(s), "
                               f"{report['exchanges']} exchanges, ingest {report['ingest_s']:.1f} s"))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
