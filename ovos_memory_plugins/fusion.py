"""Fusing ranked hit lists from several retrievers: pure functions, no I/O.

Input is a list of ``(name, weight, hits)``; hits are deduplicated by their stripped text.
Results are copies: the members' hit objects are never modified.

The reference package's own example (docs/compatibility.md), A=[x:0.9, y:0.5] with weight 1, B=[y:12, z:3]
with weight 2::

    >>> from ovos_memory_plugins.common import MemoryHit
    >>> A = [MemoryHit("x", score=0.9), MemoryHit("y", score=0.5)]
    >>> B = [MemoryHit("y", score=12), MemoryHit("z", score=3)]
    >>> [(h.content, round(h.metadata["fusion_score"], 5)) for h in rrf([("A", 1.0, A), ("B", 2.0, B)])]
    [('y', 0.04892), ('z', 0.03226), ('x', 0.01639)]
    >>> [(h.content, h.metadata["fusion_score"]) for h in weighted([("A", 1.0, A), ("B", 2.0, B)])]
    [('y', 2.0), ('x', 1.0), ('z', 0.0)]
    >>> [h.content for h in merge([("A", 1.0, A), ("B", 2.0, B)])]
    ['y', 'z', 'x']
    >>> [h.content for h in interleave([("A", 1.0, A), ("B", 2.0, B)])]
    ['x', 'y', 'z']
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .common import MemoryHit

__all__ = [
    "fuse",
    "fuse_interleave",
    "fuse_merge",
    "fuse_priority",
    "fuse_rrf",
    "fuse_weighted",
    "FUSION_MODES",
    "highest_fused_score",
    "hit_key",
    "interleave",
    "merge",
    "priority",
    "RankedLists",
    "rrf",
    "weighted",
]

FUSION_MODES = ("rrf", "weighted", "merge", "priority", "interleave")

#: ``[(retriever name, weight, hits best first), ...]``: the input of every fusion.
RankedLists = list[tuple[str, float, list["MemoryHit"]]]
Ranked = Sequence[tuple[str, float, Sequence["MemoryHit"]]]


def hit_key(hit: MemoryHit) -> str:
    """The dedup key: the stripped text (two retrievers recalling one exchange agree on it)."""
    return hit.content.strip()


def _with_score(hit: MemoryHit, score: float) -> MemoryHit:
    out = copy.deepcopy(hit)
    out.metadata["fusion_score"] = score
    return out


def _fuse_scores(lists: Ranked, contribution: dict[int, list[float]]) -> list[MemoryHit]:
    # contribution[i][r] is what the hit at rank r of list i adds to its key's fused score. A text a
    # member returns twice (stored twice) counts once, at its best rank: a member votes once per text.
    totals: dict[str, float] = {}
    best: dict[str, MemoryHit] = {}
    for i, (_name, _weight, hits) in enumerate(lists):
        voted: set[str] = set()
        for rank, hit in enumerate(hits):
            key = hit_key(hit)
            if key not in voted:
                voted.add(key)
                totals[key] = totals.get(key, 0.0) + contribution[i][rank]
            if key not in best or hit.score > best[key].score:  # representative: highest native score
                best[key] = hit
    order = sorted(totals, key=lambda k: totals[k], reverse=True)  # stable: ties keep first-seen order
    return [_with_score(best[k], totals[k]) for k in order]


def fuse_rrf(lists: Ranked, k: float = 60) -> list[MemoryHit]:
    """Reciprocal-rank fusion: score = Σ weight / (k + rank), rank from 1."""
    contribution = {i: [w / (k + r + 1) for r in range(len(hits))] for i, (_, w, hits) in enumerate(lists)}
    return _fuse_scores(lists, contribution)


def highest_fused_score(mode: str, weights: Sequence[float], rrf_k: float = 60) -> float | None:
    """The best score ``mode`` can give a hit found first by every list of ``weights`` (None
    where the mode keeps the members' own scores), so a ``min_score`` above it keeps nothing.

        >>> round(highest_fused_score("rrf", [1.0, 1.0]), 4), highest_fused_score("merge", [1.0])
        (0.0328, None)
    """
    if mode == "rrf":
        return sum(weights) / (rrf_k + 1)
    return float(sum(weights)) if mode == "weighted" else None


def fuse_weighted(lists: Ranked) -> list[MemoryHit]:
    """Min-max normalise each list's native scores to [0, 1] (1.0 if all equal); score = Σ weight * norm."""
    contribution = {}
    for i, (_, w, hits) in enumerate(lists):
        scores = [h.score for h in hits]
        lo, hi = (min(scores), max(scores)) if scores else (0.0, 0.0)
        contribution[i] = [w * ((s - lo) / (hi - lo) if hi > lo else 1.0) for s in scores]
    return _fuse_scores(lists, contribution)


def fuse_merge(lists: Ranked, dedup: bool = True) -> list[MemoryHit]:
    """The union sorted by native score; with ``dedup`` the best-scoring copy of each text."""
    every = [copy.deepcopy(h) for _, _, hits in lists for h in hits]
    if dedup:
        best: dict[str, MemoryHit] = {}
        for hit in every:
            key = hit_key(hit)
            if key not in best or hit.score > best[key].score:
                best[key] = hit
        every = list(best.values())
    return sorted(every, key=lambda h: h.score, reverse=True)


def fuse_priority(lists: Ranked) -> list[MemoryHit]:
    """The first list, in config order, that has any hits, unchanged."""
    for _, _, hits in lists:
        if hits:
            return [copy.deepcopy(h) for h in hits]
    return []


def fuse_interleave(lists: Ranked, dedup: bool = True) -> list[MemoryHit]:
    """Round-robin by rank over the lists in config order, skipping texts already taken."""
    out, seen = [], set()
    depth = max((len(hits) for _, _, hits in lists), default=0)
    for rank in range(depth):
        for _, _, hits in lists:
            if rank < len(hits):
                key = hit_key(hits[rank])
                if dedup and key in seen:
                    continue
                seen.add(key)
                out.append(copy.deepcopy(hits[rank]))
    return out


def fuse(mode: str, lists: Ranked, *, rrf_k: float = 60, dedup: bool = True) -> list[MemoryHit]:
    """Dispatch on ``mode`` (one of :data:`FUSION_MODES`); an unknown mode is a ValueError."""
    if mode == "rrf":
        return fuse_rrf(lists, rrf_k)
    if mode == "weighted":
        return fuse_weighted(lists)
    if mode == "merge":
        return fuse_merge(lists, dedup)
    if mode == "priority":
        return fuse_priority(lists)
    if mode == "interleave":
        return fuse_interleave(lists, dedup)
    raise ValueError(f"unknown fusion mode {mode!r}; allowed values are {', '.join(FUSION_MODES)}")


# The short names of this package's 1.3 release.
rrf, weighted, merge, priority, interleave = fuse_rrf, fuse_weighted, fuse_merge, fuse_priority, fuse_interleave
