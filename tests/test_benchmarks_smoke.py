"""The benchmark harnesses themselves work (no timing is asserted here: that is benchmarks/' job)."""
from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


locomo = _load("locomo")


class WordOverlapMemory:
    """A trivial retriever: every exchange is a document, ranked by words shared with the query."""

    def __init__(self):
        self.docs: dict[str, list[str]] = {}
        self.flushed = self.closed = False

    def update_history(self, new_messages, session_id):
        self.docs.setdefault(session_id, []).append("\n".join(m.content for m in new_messages))

    def search(self, query, session_id=None, top_k=None):
        words = set(re.findall(r"\w+", query.lower()))
        docs = self.docs.get(session_id, [])
        ranked = sorted(docs, key=lambda d: -len(words & set(re.findall(r"\w+", d.lower()))))
        return [{"content": d} for d in ranked[:top_k]]

    def flush(self):
        self.flushed = True

    def close(self):
        self.closed = True


def _turn(speaker, dia_id, text):
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


CONVERSATION = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Ana", "speaker_b": "Bo",
        "session_1_date_time": "1 May 2023", "session_2_date_time": "2 May 2023", "session_3_date_time": "x",
        "session_1": [
            _turn("Ana", "D1:1", "I adopted a cat called Miso."),
            _turn("Bo", "D1:2", "Lovely name!"),
            _turn("Ana", "D1:3", "My sister lives in Porto."),
            _turn("Ana", "D1:4", "She teaches   chemistry."),
            _turn("Bo", "D1:5", "Porto is beautiful."),
            _turn("Ana", "D1:6", "Bye for now."),
        ],
        "session_2": [
            _turn("Bo", "D2:1", "I ran a marathon in Lisbon last week."),
            _turn("Ana", "D2:2", "Congratulations on the marathon!"),
            _turn("Bo", "D2:3", "Thanks, my knees hurt."),
        ],
    },
    "qa": [
        {"question": "What is the name of Ana's cat?", "answer": "Miso", "evidence": ["D1:1"], "category": 4},
        {"question": "What does Ana's sister teach?", "answer": "chemistry", "evidence": ["D1:4; D1:3"],
         "category": 1},
        {"question": "Where did Bo run a marathon?", "answer": "Lisbon", "evidence": ["D2:1"], "category": 2},
        {"question": "Does Ana own a dog?", "adversarial_answer": "yes", "evidence": ["D1:1"], "category": 5},
    ],
}


def test_exchanges_pair_user_runs_with_the_following_answer_and_send_leftovers_alone():
    calls = list(locomo.exchanges(CONVERSATION))
    assert calls == [
        [("user", "I adopted a cat called Miso."), ("assistant", "Lovely name!")],
        [("user", "My sister lives in Porto.\nShe teaches   chemistry."), ("assistant", "Porto is beautiful.")],
        [("user", "Bye for now.")],
        [("assistant", "I ran a marathon in Lisbon last week.")],
        [("user", "Congratulations on the marathon!"), ("assistant", "Thanks, my knees hurt.")],
    ]


def test_malformed_evidence_ids_are_split_on_semicolons_and_spaces():
    assert locomo.evidence_ids(["D8:6; D9:17", "D1:2"]) == ["D8:6", "D9:17", "D1:2"]


def test_adversarial_questions_are_left_out_by_default():
    assert {q["category"] for q in locomo.questions(CONVERSATION, (1, 2, 3, 4))} == {1, 2, 4}


def test_a_memory_that_returns_everything_recalls_every_question():
    built = []

    def factory(session_hint):
        built.append(WordOverlapMemory())
        return built[-1]

    report = locomo.evaluate(factory, ks=(1, 100), conversations=[CONVERSATION])
    assert report["overall"][100]["recall"] == 1.0
    assert report["overall"][100]["n"] == 3
    assert report["exchanges"] == 5
    assert built[0].flushed and built[0].closed
    # Recalled characters are what the hits cost: all five documents for every question.
    total = sum(len(d) for d in built[0].docs["locomo-tiny"])
    assert report["overall"][100]["mean_chars"] == total


def test_recall_at_one_counts_only_questions_whose_top_hit_holds_the_evidence():
    report = locomo.evaluate(WordOverlapMemory, ks=(1,), conversations=[CONVERSATION])
    assert report["by_category"][4][1]["recall"] == 1.0  # "cat" and "name" point at the Miso exchange
    assert 0.0 <= report["overall"][1]["recall"] <= 1.0
    assert report["overall"][1]["latency_ms_p90"] >= report["overall"][1]["latency_ms_median"] >= 0


def test_a_memory_that_finds_nothing_recalls_nothing():
    class Empty(WordOverlapMemory):
        def search(self, query, session_id=None, top_k=None):
            return []

    report = locomo.evaluate(Empty, ks=(5,), conversations=[CONVERSATION])
    assert report["overall"][5]["recall"] == 0.0
    assert report["overall"][5]["mean_chars"] == 0.0


class TurnMemory(WordOverlapMemory):
    """A retriever that builds turns: a facts block, the top hit under a header, the utterance."""

    header = "Recalled:"

    def __init__(self):
        super().__init__()
        self.imported = False

    def import_exchanges(self, session_id, items):
        self.imported = True

    def build_conversation_context(self, utterance, session_id):
        hits = self.search(utterance, session_id, top_k=1)
        return [_system("Facts:\n- likes tea"), *([_system(self.header + "\n- " + hits[0]["content"])] if hits else []),
                locomo._message("user", utterance)]


def _system(text):
    from ovos_plugin_manager.templates.agents import AgentMessage, MessageRole

    return AgentMessage(MessageRole.SYSTEM, text)


def test_the_live_protocol_feeds_turns_and_scores_what_the_turn_adds():
    built = []

    def factory():
        built.append(TurnMemory())
        return built[-1]

    report = locomo.evaluate(factory, ks=(1,), conversations=[CONVERSATION])
    assert not built[0].imported and len(built[0].docs["locomo-tiny"]) == 5, "live: update_history, turn by turn"
    overall = report["overall"][1]
    # The cat question's top hit is the evidence, inside the recall block the turn adds.
    assert report["by_category"][4][1]["in_context"] == 1.0
    # Facts and headers count: every turn adds the facts block at least.
    assert overall["added_total_chars"] > len("Facts:\n- likes tea") + len("Recalled:")
    assert overall["added_total_chars"] - overall["added_chars"] == len("Recalled:"), "the recall header apart"
    dated = locomo.evaluate(factory, ks=(1,), conversations=[CONVERSATION], dated=True)
    assert built[-1].imported and dated["conversations"] == 1


def test_standard_metrics_count_evidence_turns_and_sessions():
    turns = [("a1", 1), ("a2", 1), ("b1", 2), ("c1", 3)]
    hits = ["Q: b1", "Q: a1 A: a2", "Q: zz", "Q: c1"]
    got = locomo.standard_metrics(hits, ["a2"], [1], turns)
    assert got["turn_hit@1"] == 0.0 and got["turn_hit@5"] == 1.0 == got["turn_hit@10"]
    assert got["session_hit@1"] == 0.0
    # sessions in order of first appearance: 2, 1, 3; the evidence session is second.
    assert got["session_ndcg@5"] == pytest.approx(1 / math.log2(3))
    assert locomo.standard_metrics([], ["a2"], [1], turns) == {
        "turn_hit@1": 0.0, "turn_hit@5": 0.0, "turn_hit@10": 0.0, "session_hit@1": 0.0, "session_ndcg@5": 0.0}
    assert [q["sessions"] for q in locomo.questions(CONVERSATION, (1, 2, 4))] == [[1], [1], [2]]


def test_a_memory_without_search_is_reported_as_unavailable():
    class NoSearch:
        def update_history(self, new_messages, session_id):
            pass

    with pytest.raises(locomo.BackendUnavailable, match="no search"):
        locomo.evaluate(NoSearch, conversations=[CONVERSATION])


def test_the_harness_runs_on_one_real_locomo_conversation():
    try:
        path = locomo.locate_dataset()
    except FileNotFoundError:
        pytest.skip("LoCoMo dev split not present (set LOCOMO_PATH)")
    report = locomo.evaluate(WordOverlapMemory, ks=(5, 10), limit_conversations=1, path=path)
    assert report["conversations"] == 1
    assert report["overall"][10]["recall"] >= report["overall"][5]["recall"] > 0
    assert "**all**" in locomo.format_table(report)


def test_dated_exchanges_are_what_update_history_stores_with_their_session_dates(tmp_path):
    from ovos_memory_plugins.lexical import LexicalMemory

    dated = {**CONVERSATION, "conversation": {**CONVERSATION["conversation"],
                                              "session_1_date_time": "1:56 pm on 8 May, 2023",
                                              "session_2_date_time": "10:37 am on 27 June, 2023"}}
    items = locomo.dated_exchanges(dated)
    assert [i["ts"] for i in items] == [1683554160.0, 1683554161.0, 1687862220.0, 1687862221.0]
    turns, imported = (LexicalMemory({"db_path": str(tmp_path / f"{n}.db")}) for n in ("turns", "imported"))
    try:
        locomo._feed(turns, dated, "s", dated=False)
        locomo._feed(imported, dated, "s", dated=True)
        assert [d.text for d in imported._docs.for_session("s")] == [d.text for d in turns._docs.for_session("s")]
        assert [d.ts for d in imported._docs.for_session("s")] == [i["ts"] for i in items]
    finally:
        turns.close()
        imported.close()
    assert locomo.session_time("x") is None


def test_the_composite_hybrid_backend_is_the_hybrid_preset():
    from ovos_memory_plugins.composite import HYBRID_PRESET, PRESET_CONTEXT, PRESET_RETRIEVAL, PRESET_SETTINGS

    _, config = locomo.backend_config("composite-hybrid", Path("/f"))
    assert [m["module"] for m in config["members"]] == [m["module"] for m in HYBRID_PRESET]
    for ours, preset in zip(config["members"], HYBRID_PRESET):
        assert ours["config"].get("retrieval") == preset["config"].get("retrieval")
        assert ours["config"].get("context_facts") == preset["config"].get("context_facts")
    assert {k: config[k] for k in PRESET_SETTINGS} == PRESET_SETTINGS
    assert config["context"] == PRESET_CONTEXT
    assert config["retrieval"] == PRESET_RETRIEVAL


def test_a_backend_that_is_not_installed_fails_with_a_clear_message():
    with pytest.raises(locomo.BackendUnavailable, match="unknown backend"):
        locomo.backend_config("no-such-backend", Path("."))


# -- the side-by-side runner's pieces --------------------------------------------------------------
worker = _load("_worker")
report = _load("_report")


def test_the_synthetic_workload_is_the_same_text_for_the_same_seed():
    a, b = worker.Workload(3), worker.Workload(3)
    user, assistant = a.exchange()
    assert (user, assistant) == b.exchange()
    assert len(user.split()) == 8 and len(assistant.split()) == 15 and len(a.query().split()) == 6
    assert len(a.tokens) == worker.SYNTHETIC_TOKENS and len(worker.COMMON_WORDS) == 16


def test_the_worker_measures_a_backend_through_its_entry_point_in_a_fresh_process(tmp_path):
    import subprocess

    task = {"task": "latency", "entry_point": "ovos-memory-plugin-recency", "config": {"db_path": "{dir}/r.json"},
            "n": 30, "calls": 10, "workdir": str(tmp_path)}
    out = subprocess.run([sys.executable, "-I", str(BENCH / "_worker.py"), json.dumps(task)],
                         capture_output=True, text=True, timeout=120).stdout
    result = json.loads(out[out.rindex("@@RESULT@@") + len("@@RESULT@@"):])
    assert result["ok"], result
    assert result["stored"] == 30 and result["build_us"]["n"] == 5 and result["update_us"]["n"] == 5
    assert result["build_us"]["p90"] >= result["build_us"]["median"] > 0
    assert result["peak_rss_mb"] > 1
    assert not any(tmp_path.iterdir())  # the worker's folder is removed afterwards


def test_the_worker_reports_a_missing_entry_point_instead_of_crashing(tmp_path):
    import subprocess

    task = {"task": "startup", "entry_point": "ovos-memory-plugin-nope", "config": {}, "workdir": str(tmp_path)}
    out = subprocess.run([sys.executable, "-I", str(BENCH / "_worker.py"), json.dumps(task)],
                         capture_output=True, text=True, timeout=120).stdout
    result = json.loads(out[out.rindex("@@RESULT@@") + len("@@RESULT@@"):])
    assert result == {"ok": False, "error": "LookupError: ovos-memory-plugin-nope is not installed or failed to import",
                      "python": result["python"]}


def _stats(median):
    return {"median": median, "p90": median * 1.5, "n": 10}


def test_the_report_shows_ratios_and_says_when_the_reference_was_not_measured():
    cell = {"backend": "lexical", "storage": "ram", "n": 1000, "ok": True, "stored": 1000, "settle_s": 0.0,
            "drain_s": 0.0, "populate_us_per_exchange": 10.0, "peak_rss_mb": 50.0}
    results = {
        "mode": "quick", "command": "python benchmarks/run.py --quick", "started": "now", "elapsed_s": 1.0,
        "ours": "ours 1", "reference": "ref 1", "llm": "fake", "calls": 10, "budget_s": 5.0,
        "machine": {"cpu": "cpu", "cores": 2, "memory": "1 GiB", "os": "Linux", "python": "3.11", "sqlite": "3",
                    "filesystem_file_db": "ext4", "ram_dir": "/dev/shm"},
        "load_before": (0.1, 0.1, 0.1), "load_after": (0.2, 0.2, 0.2),
        "notes": ["**The reference package was not measured**: offline."],
        "latency": [{**cell, "package": "ours", "build_us": _stats(100.0), "update_us": _stats(30.0)},
                    {**cell, "package": "reference", "build_us": _stats(200.0), "update_us": _stats(10.0)},
                    {"backend": "entity", "storage": "ram", "n": 1000, "package": "ours", "ok": False,
                     "error": "no test LLM endpoint"}],
        "startup": [{"backend": "recency", "package": package, "ok": True, "load_s": 0.01 * f, "construct_s": 0.001,
                     "first_update_s": 0.001, "first_build_s": 0.001, "opm_import_s": 0.2, "process_wall_s": 0.3,
                     "peak_rss_mb": 40.0} for package, f in (("ours", 1), ("reference", 2))],
        "locomo": [],
    }
    text = report.render(results, [])
    assert "| lexical | 1,000 | 100.0 / 150.0 | 200.0 / 300.0 | 0.50× |" in text
    assert "**3.00×**" in text  # slower updates are marked, not hidden
    assert "not available: no test LLM endpoint" in text
    assert "The reference package was not measured" in text
    assert "| recency | 13.0 | 23.0 | 0.57× |" in text  # plugin start-up without the host's own import


def test_the_runner_carries_on_without_the_reference_when_its_venv_cannot_be_made(tmp_path, monkeypatch):
    run = _load("run")
    monkeypatch.setattr(run, "REF_VENV", tmp_path / "reference-venv")
    python, why = run.ensure_reference(str(tmp_path / "no-such-python"), timeout=30, refresh=False)
    assert python is None
    assert "reference venv could not be created" in why
    assert not (tmp_path / "reference-venv").exists()  # no half-made venv left to be reused


def test_both_packages_get_the_same_drop_in_config_for_every_shared_backend():
    run = _load("run")
    for backend in run.BACKENDS:
        for storage in run.STORAGES:
            entry_point, config = run.backend_config(backend, storage, "http://127.0.0.1:9/v1")
            assert entry_point == f"ovos-memory-plugin-{backend}"
            assert ("{dir}" in json.dumps(config)) == (storage == "file" or backend == "longterm")
    assert run.backend_config("entity", "ram", None) is None  # no endpoint: not measured, not faked


def _busy_report(p99: float) -> dict:
    turns = {"n": 32, "median": 40.0, "p99": p99, "max": p99}
    verify = {"flush_ok": True, "flush_s": 12.0, "pending_after_flush": 0, "long_exchanges": 2, "not_embedded": 0,
              "not_found": 0}
    return {"command": "python benchmarks/bench_busy_turns.py --full", "started": "now", "package": "here",
            "elapsed_s": 10.0, "load_before": (1.0, 1.0, 1.0), "load_after": (2.0, 1.0, 1.0), "cores": 2,
            "single": [{"backend": "local-rag", "idle": turns, "cases": [
                {"long": 16, "build_busy": turns, "build_quiet": {"n": 0}, "update_busy": turns, "verify": verify}]}],
            "multi": [{"backend": "hybrid", "procs": 4, "threads": 4, "words": 4800, "build_busy": turns,
                       "build_all": turns, "update_busy": turns, "embedded": [3, 5], "documents": 8,
                       "verify": [verify, {**verify, "pending_after_flush": 1}]}]}


def test_the_busy_turns_section_says_whether_the_targets_are_met_and_what_was_lost():
    busy = _load("bench_busy_turns")
    met = busy.markdown(_busy_report(120.0))
    assert "| local-rag | 16 | 40 / 120 / 120 (n=32) | meets |" in met and "| none |" in met
    assert "| 4 x 4 | 4,800 |" in met and "3 + 5 (8)" in met and "1 pending" in met  # lost work is reported
    assert "local-rag: p99 120 ms, max 120 ms, the targets hold" in met and "waiting for a core" not in met
    missed = busy.markdown({**_busy_report(151.0), "load_after": (5.0, 1.0, 1.0)})
    assert "| misses |" in missed and "the targets do not hold" in missed
    assert "waiting for a core" in missed  # a loaded machine is said so next to its numbers


def test_a_section_written_into_the_report_replaces_its_earlier_self_and_survives_a_new_report(tmp_path):
    busy = _load("bench_busy_turns")
    path = tmp_path / "benchmarks.md"
    path.write_text("# Benchmarks\n\nold body\n", encoding="utf-8")
    busy.write_section(path, busy.markdown(_busy_report(120.0)))
    busy.write_section(path, busy.markdown(_busy_report(99.0)))
    text = path.read_text(encoding="utf-8")
    assert text.count("section:start busy-turns") == 1 and "40 / 99 / 99" in text and "old body" in text
    kept = report.kept_sections(text)
    assert kept.strip().startswith("<!-- section:start busy-turns") and "40 / 99 / 99" in kept


@pytest.mark.postgres
def test_the_postgresql_benchmark_runs_and_reports_every_cell(tmp_path):
    import subprocess

    from tests._postgres import server_url

    out = tmp_path / "postgres.json"
    args = ["--quick", "--skip-locomo", "--calls", "10", "--url", server_url(), "--json", str(out)]
    done = subprocess.run([sys.executable, str(BENCH / "bench_postgres.py"), *args], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    cells = {(c["backend"], c["engine"]) for c in results["latency"]}
    assert cells == {(b, e) for b in ("lexical", "local-rag", "hybrid") for e in ("sqlite", "postgres")}
    assert results["writers"]["lost"] == 0 and results["writers"]["doubled"] == 0
    assert "| lexical | 1,000 | postgres |" in done.stdout


def test_the_forget_benchmark_runs_on_a_small_store(tmp_path):
    import os
    import subprocess

    out = subprocess.run([sys.executable, str(BENCH / "bench_forget.py"), "--n", "300"], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "XDG_DATA_HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    assert figures["exchanges"] == 300 and figures["of which the rewrite (VACUUM + WAL emptied) s"] > 0


# -- the live section of the report ----------------------------------------------------------------
live_report = _load("live_report")


def _live(conv_shares):
    """A locomo.py report whose rows hold the given in-context results per conversation."""
    rows = [{"question": f"{conv}:{i}", "conversation": conv, "k": 5, "in_context": hit}
            for conv, hits in conv_shares.items() for i, hit in enumerate(hits)]
    n = len(rows)
    share = sum(r["in_context"] for r in rows) / n
    stats = {"5": {"n": n, "recall": share, "in_context": share, "added_total_chars": 1000.0}}
    by_conversation = {c: {"5": {"in_context": sum(h) / len(h)}} for c, h in conv_shares.items()}
    return {"overall": stats, "by_conversation": by_conversation, "rows": rows}


def test_the_gain_over_the_best_member_comes_with_a_paired_bootstrap_interval(tmp_path):
    preset = _live({"a": [True, True, True, False], "b": [True, True]})
    member = _live({"a": [True, False, False, False], "b": [True, True]})
    weak = _live({"a": [False] * 4, "b": [False, False]})
    gain, low, high = live_report.gain_interval(live_report.per_question(preset), live_report.per_question(member))
    assert gain == pytest.approx(2 / 6) and low <= gain <= high and high <= 4 / 6
    same = live_report.gain_interval(live_report.per_question(member), live_report.per_question(member))
    assert same == (0.0, 0.0, 0.0)
    reports = {"lexical-neighbours": member, "local-rag-neighbours": weak, "composite-hybrid-loco": preset}
    lines = live_report.section(reports, "composite-hybrid-loco")
    assert lines[0] == live_report.START and lines[-1] == live_report.END
    assert any("over its best member, `lexical-neighbours`" in line for line in lines)
    assert any(line.startswith("| **all** | +0.333 |") for line in lines)
    page = tmp_path / "b.md"
    page.write_text(f"# B\n\n{live_report.START}\nstale table\n{live_report.END}\n\nafter\n", encoding="utf-8")
    live_report.write_docs(lines, page)
    text = page.read_text(encoding="utf-8")
    assert "stale table" not in text and text.endswith("\n\nafter\n") and "| lexical-neighbours |" in text
    first = tmp_path / "first.md"
    first.write_text(f"# B\n\n{live_report.BEFORE}\n\nold tables\n", encoding="utf-8")
    live_report.write_docs(lines, first)
    text = first.read_text(encoding="utf-8")
    assert text.index(live_report.START) < text.index(live_report.BEFORE) < text.index("old tables")


class _Recorder:
    """A member that records what it is fed."""

    def __init__(self, fed: list[str]):
        self.fed = fed

    def update_history(self, new_messages, session_id):
        self.fed.append(new_messages[0].content)

    def flush(self, timeout=None):
        return True

    def close(self):
        pass


def test_bench_composite_store_keeps_other_files_and_resumes_a_cut_feed(tmp_path, monkeypatch):
    sys.path.insert(0, str(BENCH))
    bench = _load("bench_composite")
    from _worker import Workload

    fed: list[str] = []
    monkeypatch.setattr(bench, "alone", lambda root: {"m": _Recorder(fed)})
    (tmp_path / "mine.txt").write_text("not the benchmark's")
    folder = bench.feed(str(tmp_path), 5, Workload(seed=3))
    assert (tmp_path / "mine.txt").read_text() == "not the benchmark's"  # the rest of DIR untouched
    assert Path(folder) == tmp_path / "fed-5" and (tmp_path / "fed-5" / "done").exists()
    everything = list(fed)
    assert len(everything) == 5
    assert bench.feed(str(tmp_path), 5, Workload(seed=3)) == folder and len(fed) == 5  # done: reused
    # A feed cut short after its third exchange was saved resumes with the fourth.
    (tmp_path / "fed-5" / "done").unlink()
    (tmp_path / "fed-5" / "progress").write_text("3")
    fed.clear()
    bench.feed(str(tmp_path), 5, Workload(seed=3))
    assert fed == everything[3:]


def test_a_generated_docs_section_rewritten_leaves_the_page_as_it_was(tmp_path):
    report = _load("_report")
    page = tmp_path / "page.md"
    start = "<!-- section:start demo -->"
    section = f"{start}\n## Demo\n\nnumbers\n{report.KEEP_END}\n"  # as a generated file ends
    page.write_text("# Title\n\n## Plots\n", encoding="utf-8")
    report.replace_section(page, start, section, before="## Plots")
    once = page.read_text(encoding="utf-8")
    report.replace_section(page, start, section, before="## Plots")
    assert page.read_text(encoding="utf-8") == once and "numbers" in once


def test_the_follow_up_benchmark_asks_each_question_then_a_follow_up_in_both_modes(tmp_path):
    from ovos_memory_plugins.lexical import LexicalMemory

    follow_ups = _load("follow_ups")

    def factory(hint):
        return LexicalMemory({"db_path": str(tmp_path / f"{hint}.db"), "max_history": 2})

    rows = follow_ups.conversation_rows(CONVERSATION, factory)
    assert len(rows) == 3  # the three questions of categories 1-4
    # Asked alone, the cat's name is recalled; "When was that?" alone names nothing; folded into
    # the question it leans on, it recalls what the question did.
    cat = rows[0]
    assert (cat["question"], cat["utterance"], cat["follow-up"]) == (True, False, True)
    # Each asked exchange is forgotten: the store holds only the conversation again.
    memory = factory("locomo-tiny")
    try:
        assert not [h for h in memory.search("Let me think", "locomo-tiny", top_k=20) if "Let me think" in h.content]
    finally:
        memory.close()
    table = follow_ups.report(rows)
    assert "| the follow-up, `query_mode: follow-up` |" in table and "tiny" in table
