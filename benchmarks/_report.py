"""Turns the runner's raw results into ``benchmarks.md`` and PNG plots (matplotlib, Agg)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

BACKENDS = ("recency", "lexical", "longterm", "entity", "composite")
STORAGE_LABEL = {"ram": "in RAM", "file": "on a file DB"}
RAM_NOTE = ("longterm has no in-memory mode in either package: its \"RAM\" cell keeps its JSON file on tmpfs "
            "(`/dev/shm`); entity uses `backend: memory`, recency no `db_path`, lexical `:memory:`.")


def _num(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def _ratio(ours: float | None, ref: float | None) -> str:
    if not ours or not ref or math.isnan(ours) or math.isnan(ref):
        return "–"
    r = ours / ref
    text = f"{r:.2f}×" if r < 10 else f"{r:.0f}×"
    return f"**{text}**" if r > 1.0 else text


def _pair(stats: dict[str, float] | None) -> str:
    return f"{_num(stats['median'])} / {_num(stats['p90'])}" if stats else "–"


def _index(cells: list[dict[str, Any]], *keys: str) -> dict[tuple, dict[str, Any]]:
    return {tuple(c.get(k) for k in keys): c for c in cells}


def _cell_error(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "not run"
    return "not available: " + cell.get("error", "?").replace("|", "/")[:120]


def latency_tables(results: dict[str, Any]) -> list[str]:
    cells = results.get("latency", [])
    idx = _index(cells, "backend", "storage", "n", "package")
    ns = sorted({c["n"] for c in cells})
    out = []
    for storage in ("ram", "file"):
        out += [f"### {STORAGE_LABEL[storage]}", "",
                "| backend | N | build ours | build ref | ratio | update ours | update ref | ratio | "
                "store ours µs/exch | store ref µs/exch | peak RSS ours / ref MB |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for backend in BACKENDS:
            for n in ns:
                ours, ref = idx.get((backend, storage, n, "ours")), idx.get((backend, storage, n, "reference"))
                if ours is None and ref is None:
                    continue
                o = ours if ours and ours.get("ok") else None
                r = ref if ref and ref.get("ok") else None
                if not o and not r:
                    out.append(f"| {backend} | {n:,} | {_cell_error(ours)} ||||||||| ")
                    continue
                stored = []
                for label, c in (("ours", o), ("ref", r)):
                    if c and c["stored"] < n:
                        stored.append(f"{label} reached {c['stored']:,}")
                n_text = f"{n:,}" + (f" ({'; '.join(stored)})" if stored else "")
                row = [backend, n_text,
                       _pair(o["build_us"]) if o else _cell_error(ours),
                       _pair(r["build_us"]) if r else _ref_missing(ref),
                       _ratio(o and o["build_us"]["median"], r and r["build_us"]["median"]),
                       _pair(o["update_us"]) if o else "–", _pair(r["update_us"]) if r else "–",
                       _ratio(o and o["update_us"]["median"], r and r["update_us"]["median"]),
                       _num(o["populate_us_per_exchange"]) if o else "–",
                       _num(r["populate_us_per_exchange"]) if r else "–",
                       f"{_num(o['peak_rss_mb'], 0) if o else '–'} / {_num(r['peak_rss_mb'], 0) if r else '–'}"]
                out.append("| " + " | ".join(row) + " |")
        out.append("")
    return out


def _ref_missing(ref: dict[str, Any] | None) -> str:
    return "not measured" if ref is None else _cell_error(ref)


def background_table(results: dict[str, Any]) -> list[str]:
    cells = [c for c in results.get("latency", []) if c.get("ok") and c["package"] == "ours"
             and (c["settle_s"] > 0.05 or c["drain_s"] > 0.05)]
    if not cells:
        return ["No backend of ours had background work left after the workload (every `flush()` "
                "returned in under 50 ms).", ""]
    out = ["| backend | storage | N | flush after storing N (s) | flush after the timed calls (s) |",
           "|---|---|---|---|---|"]
    def seconds(value: float, finished: bool) -> str:
        return f"{value:.2f}" + ("" if finished else " (timed out, work left)")

    for c in cells:
        settle, drain = seconds(c["settle_s"], c.get("settled", True)), seconds(c["drain_s"], c.get("drained", True))
        out.append(f"| {c['backend']} | {c['storage']} | {c['stored']:,} | {settle} | {drain} |")
    return out + [""]


def _both(o: dict[str, Any] | None, r: dict[str, Any] | None, key: str, scale: float = 1000.0,
          digits: int = 1) -> str:
    """``ours / reference`` of one startup field (seconds shown as ms by default)."""
    return f"{_num(o[key] * scale, digits) if o else '–'} / {_num(r[key] * scale, digits) if r else '–'}"


def _plugin_cost(c: dict[str, Any]) -> float:
    """Load through the entry point, construct, first update and first build: the plugin's own start-up."""
    return c["load_s"] + c["construct_s"] + c["first_update_s"] + c["first_build_s"]


def startup_table(results: dict[str, Any]) -> list[str]:
    idx = _index(results.get("startup", []), "backend", "package")
    out = ["| backend | plugin start-up ours ms | ref ms | ratio | entry-point load ours / ref ms "
           "| construct ours / ref ms | first update ours / ref ms | first build ours / ref ms "
           "| OPM import ours / ref ms | whole process ours / ref ms | peak RSS ours / ref MB |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for backend in BACKENDS:
        o, r = idx.get((backend, "ours")), idx.get((backend, "reference"))
        if o is None and r is None:
            continue
        o = o if o and o.get("ok") else None
        r = r if r and r.get("ok") else None
        if not o and not r:
            out.append(f"| {backend} | {_cell_error(idx.get((backend, 'ours')))} |||||||||| ")
            continue
        out.append("| " + " | ".join([
            backend, _num(_plugin_cost(o) * 1000) if o else _cell_error(idx.get((backend, "ours"))),
            _num(_plugin_cost(r) * 1000) if r else "–", _ratio(o and _plugin_cost(o), r and _plugin_cost(r)),
            _both(o, r, "load_s"), _both(o, r, "construct_s", digits=2), _both(o, r, "first_update_s", digits=2),
            _both(o, r, "first_build_s", digits=2), _both(o, r, "opm_import_s", digits=0),
            _both(o, r, "process_wall_s", digits=0), _both(o, r, "peak_rss_mb", 1.0, 0)]) + " |")
    return out + [""]


def _k(per_k: dict[str, Any], k: int) -> dict[str, float]:
    return per_k.get(str(k)) or per_k.get(k)


def locomo_tables(results: dict[str, Any]) -> list[str]:
    cells = results.get("locomo", [])
    if not cells:
        return ["Not run.", ""]
    out = ["| package | backend | embedder | R@5 | R@10 | chars@5 | chars@10 | search ms @5 median / p90 | "
           "search ms @10 median / p90 | store s | questions |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    cats: list[str] = []
    for c in cells:
        label = [c["package"], c["backend"], c.get("embedder") or "–"]
        if not c.get("ok"):
            out.append("| " + " | ".join(label) + f" | {_cell_error(c)} ||||||||")
            continue
        o5, o10 = _k(c["overall"], 5), _k(c["overall"], 10)
        out.append("| " + " | ".join(label + [
            f"{o5['recall']:.3f}", f"{o10['recall']:.3f}", _num(o5["mean_chars"], 0), _num(o10["mean_chars"], 0),
            f"{o5['latency_ms_median']:.2f} / {o5['latency_ms_p90']:.2f}",
            f"{o10['latency_ms_median']:.2f} / {o10['latency_ms_p90']:.2f}",
            f"{c['ingest_s']:.1f}", str(o5["n"])]) + " |")
        cats = sorted(c["by_category"], key=int)
    if cats:
        names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
        out += ["", "Recall@5 / @10 per question category:", "",
                "| package | backend | embedder | " + " | ".join(f"{c} {names.get(int(c), '')}" for c in cats) + " |",
                "|---|---|---|" + "---|" * len(cats)]
        for c in cells:
            if c.get("ok"):
                per = [f"{_k(c['by_category'][cat], 5)['recall']:.2f} / {_k(c['by_category'][cat], 10)['recall']:.2f}"
                       f" (n={_k(c['by_category'][cat], 5)['n']})" for cat in cats]
                out.append("| " + " | ".join([c["package"], c["backend"], c.get("embedder") or "–"] + per) + " |")
    return out + [""] + _conversation_table(cells)


def _recall_chars(stats: dict[str, Any]) -> str:
    return f"{stats['recall']:.3f} / {_num(stats['mean_chars'], 0)}"


def _conversation_table(cells: list[dict[str, Any]]) -> list[str]:
    """R@5 / chars@5 per conversation and, for turns (``--context``), what the context adds."""
    ok = [c for c in cells if c.get("ok") and c.get("by_conversation")]
    convs = sorted({conv for c in ok for conv in c["by_conversation"]})
    if not convs:
        return []
    out = ["Recall@5 / chars@5 per conversation, and the questions asked as turns: the characters the context "
           "adds besides the window (recalled exchanges and facts; in brackets with the recall header and "
           "bullets) and the share of questions with an evidence turn in it:", "",
           "| package | backend | embedder | " + " | ".join(convs) + " | added chars | in context |",
           "|---|---|---|" + "---|" * (len(convs) + 2)]
    for c in ok:
        per = [_recall_chars(_k(c["by_conversation"][conv], 5)) if conv in c["by_conversation"] else "–"
               for conv in convs]
        o5 = _k(c["overall"], 5)
        added = (f"{_num(o5['added_chars'], 0)} ({_num(o5['added_total_chars'], 0)})", f"{o5['in_context']:.3f}") \
            if "added_chars" in o5 else ("–", "–")
        out.append("| " + " | ".join([c["package"], c["backend"], c.get("embedder") or "–", *per, *added]) + " |")
    return out + [""]


# -- plots ---------------------------------------------------------------------------------------
def plot_latency(results: dict[str, Any], img: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in results.get("latency", []) if c.get("ok")]
    names = []
    for storage in ("ram", "file"):
        fig, grid = plt.subplots(2, 3, figsize=(12, 7), squeeze=False)
        axes = [ax for row in grid for ax in row]
        for ax, backend in zip(axes, BACKENDS):
            for package, style, marker in (("ours", "-", "o"), ("reference", "--", "x")):
                for what, colour in (("build_us", "tab:blue"), ("update_us", "tab:orange")):
                    pts = sorted((c["stored"], c[what]["median"]) for c in cells
                                 if c["backend"] == backend and c["storage"] == storage and c["package"] == package)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colour, marker=marker,
                                markersize=7, label=f"{'build' if what == 'build_us' else 'update'} {package}")
            ax.set_title(f"{backend} ({STORAGE_LABEL[storage]})", fontsize=10)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("stored exchanges")
            ax.set_ylabel("µs per call (median)")
            ax.grid(True, which="both", alpha=0.3)
        legend_ax = axes[-1]
        legend_ax.axis("off")
        handles = {}
        for ax in axes[:-1]:
            for h, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, h)
        if handles:
            legend_ax.legend(list(handles.values()), list(handles), loc="center", fontsize=10,
                             title="solid/o: ours, dashed/x: reference")
        fig.tight_layout()
        name = f"latency-{storage}.png"
        fig.savefig(img / name, dpi=80)
        plt.close(fig)
        names.append(name)
    return names


def plot_recall(results: dict[str, Any], img: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in results.get("locomo", []) if c.get("ok")]
    if not cells:
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for c in cells:
        label = f"{c['package']} {c['backend']}" + (f" ({c['embedder']})" if c.get("embedder") else "")
        ks = [5, 10]
        xs = [_k(c["overall"], k)["mean_chars"] for k in ks]
        ys = [_k(c["overall"], k)["recall"] for k in ks]
        ax.plot(xs, ys, marker="o", linestyle="--" if c["package"] == "reference" else "-", label=label)
        for x, y, k in zip(xs, ys, ks):
            ax.annotate(f"k={k}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("mean recalled characters per question")
    ax.set_ylabel("recall (evidence turn in the hits)")
    ax.set_title("LoCoMo dev: recall vs recalled characters", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(img / "recall-vs-chars.png", dpi=90)
    plt.close(fig)
    return ["recall-vs-chars.png"]


# -- the document --------------------------------------------------------------------------------


def render(results: dict[str, Any], images: list[str]) -> str:
    m = results["machine"]
    lb, la = results["load_before"], results["load_after"]
    lines = [
        "# Benchmarks: ovos-memory-plugins side by side with the reference package", "",
        f"Generated by `{results['command']}` ({results['mode']} mode) on {results['started']}, "
        f"in {results['elapsed_s']:.0f} s. Rerun: `make bench` (full) or `make bench-quick`.", "",
        "## Setup", "",
        f"- **Ours:** {results['ours']}. **Reference:** {results['reference']} (public pre-release from PyPI, in its "
        "own venv `.bench-cache/reference-venv`, driven only through its entry points in separate processes).",
        f"- **Machine:** {m['cpu']}, {m['cores']} cores, {m['memory']}, {m['os']}, Python {m['python']}, "
        f"SQLite {m['sqlite']}; file DBs on {m['filesystem_file_db']}, RAM cells on {m['ram_dir']}.",
        f"- **Load average** (1/5/15 min): before {lb[0]:.2f} / {lb[1]:.2f} / {lb[2]:.2f}, "
        f"after {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f}. The machine is shared: compare ratios within this run, "
        "not absolute numbers across runs.",
        f"- **LLM** for longterm and entity: {results['llm']} (both packages call the same local endpoint).",
        "- **Workload**: store N exchanges through `update_history` (one call per exchange: an 8-word "
        "user turn and a 15-word assistant turn; words drawn from 3,000 synthetic tokens, with 25% of the words "
        "taken from 16 common English words), then "
        f"{results['calls']} alternating calls of `build_conversation_context` (a 6-word query) and "
        "`update_history` (one new exchange). Same seed, same text for both packages. Times are µs per call, "
        f"median / p90. A store that cannot take N exchanges in {results['budget_s']:.0f} s is measured at the "
        "size it reached (shown in the N column).",
        "- **Ratios** are ours / reference of the medians: below 1 we are faster; **bold** marks where we are "
        "slower.",
        "- Our backends defer slow work (embedding, summaries, fact extraction) to a background worker; "
        "`update_history` times exclude that work, which the table *Background work* shows (`flush()` time).",
        "- The reference `local-rag` is not measured: it needs the `local-rag` extra (a C++ build of llama.cpp "
        "and a model download from Hugging Face), so it cannot run offline. Our local-rag is measured for recall.",
        f"- {RAM_NOTE}", ""]
    for note in results.get("notes", []):
        lines += [f"> {note}", ""]
    lines += ["## Turn latency (µs per call, median / p90)", ""] + latency_tables(results)
    lines += ["## Background work (ours)", ""] + background_table(results)
    lines += ["## Process start-up and first call", "",
              "One cold process per row (the median of the runs by wall time). *Plugin start-up* is "
              "`load_memory_plugin` (which imports every entry point of the group), construction with a file DB, "
              "the first `update_history` and the first `build_conversation_context`. The import of "
              "ovos-plugin-manager itself is shown apart because each venv holds its own OPM release "
              f"(ours: {results['ours']}; reference: {results['reference']}).", ""] + startup_table(results)
    lines += ["## Recall on LoCoMo (dev split, categories 1-4)", "",
              "The path a persona takes: each conversation is fed through `update_history` as it happens "
              "(speaker_a as USER, speaker_b as ASSISTANT, one call per exchange, stored with the clock's time), "
              "then each question is asked as a turn: *in context* is whether the text of an evidence turn is in "
              "what `build_conversation_context` adds besides the window and the utterance, *added chars* what "
              "that costs (facts, summaries, headers and bullets included). R@k reads `search(question, "
              "session_id, top_k=k)` alone: a question is recalled when one of its evidence turns is inside the "
              "hits; *chars* is the mean total length of the hits. See `benchmarks/locomo.py` for the exact "
              "protocol. Data: Maharana et al., ACL 2024, CC BY-NC 4.0.",
              "",
              "The row marked *(dated import)* is the second protocol: our backends that have "
              "`import_exchanges` get the same exchanges through it, each with its LoCoMo session's date, as a "
              "user restoring a chat log would import them (the stored exchanges are the same, only their "
              "times differ).",
              "",
              "*-neighbours* rows index each exchange with the exchanges before and after it "
              "(`retrieval.neighbour_weight: 0.5`); *composite-plain* fuses lexical and local-rag at their "
              "defaults (rrf); *composite-hybrid* is the hybrid preset (recency + lexical + local-rag, both "
              "with neighbours, + entity; score fusion with the shipped weights, fitted on these three "
              "conversations); *composite-hybrid-loco* the same, each conversation scored with the weights "
              "`benchmarks/fit_fusion.py` fits on the other two (the honest estimate); *composite-hybrid-rrf* the "
              "preset's members with rank fusion, the preset before score fusion.", ""] + locomo_tables(results)
    if images:
        lines += ["## Plots", ""] + [f"![{name}](img/{name})" for name in images] + [""]
    lines += ["## Reproduce", "", "```", "make bench        # python benchmarks/run.py --full",
              "make bench-quick  # python benchmarks/run.py --quick (CI smoke run, < 2 minutes)",
              "python benchmarks/locomo.py --backend lexical|local-rag|composite-hybrid [--embedder e5|minilm]",
              "python benchmarks/fit_fusion.py        # score-fusion weights, leave one conversation out",
              "python benchmarks/follow_ups.py --fold-weights F --write-docs  # follow-up turns, live "
              "(F: fit_fusion.py --folds F)",
              "python benchmarks/bench_lexical.py      # lexical at 1k/10k/100k against raw FTS5",
              "python benchmarks/bench_composite.py    # hybrid turn vs the sum of its members'",
              "python benchmarks/llm_eval.py --api-url URL --write-docs  # LLM memories with a real model",
              "python benchmarks/bench_busy_turns.py --full  # turns while the background is busy (section below)",
              "python benchmarks/bench_long_passages.py      # how long passages are embedded, and recall",
              "```", "",
              "What the last two scripts measured, and the decisions they led to: "
              "[design-notes.md](design-notes.md).", "",
              f"Raw numbers of this run: `.bench-cache/{results.get('raw', 'results.json')}` (not committed).", ""]
    return "\n".join(lines)


def write(results: dict[str, Any], out: Path, raw: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    img = out / "img"
    img.mkdir(exist_ok=True)
    try:
        images = plot_latency(results, img) + plot_recall(results, img)
    except ImportError as exc:  # matplotlib is a benchmark-only dependency; the tables still matter
        images = []
        results = {**results, "notes": [*results.get("notes", []), f"No plots: {exc} (pip install matplotlib)."]}
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    results = {**results, "raw": raw.name}
    path = out / "benchmarks.md"
    kept = kept_sections(path.read_text(encoding="utf-8")) if path.exists() else ""
    path.write_text(render(results, images) + kept, encoding="utf-8")
    return path


#: Sections other runners write into benchmarks.md between these markers (the PostgreSQL one:
#: benchmarks/bench_postgres.py --write); a new report keeps them.
KEEP_START, KEEP_END = "<!-- section:start", "<!-- section:end -->"


def replace_section(path: Path, start: str, section: str, before: str | None = None) -> None:
    """Put ``section`` into ``path`` in place of the one that opens with ``start`` and ends at the
    next ``KEEP_END``; a new one goes before the heading ``before`` when the page has it, else last."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    at = text.find(start)
    end = text.find(KEEP_END, at) if at >= 0 else -1
    if end >= 0:
        # The section ends at its end marker: a trailing newline would add a blank line per run.
        text = text[:at] + section.rstrip("\n") + text[end + len(KEEP_END):]
    elif before and before in text:
        text = text.replace(before, section + "\n\n" + before, 1)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def kept_sections(text: str) -> str:
    out, at = [], 0
    while (start := text.find(KEEP_START, at)) >= 0:
        end = text.find(KEEP_END, start)
        if end < 0:
            break
        at = end + len(KEEP_END)
        out.append("\n" + text[start:at] + "\n")
    return "".join(out)

