"""Score fusion: rank the union of every retriever's candidates by what their scores say.

Rank fusion (``rrf``) keeps only each hit's rank, and min-max ``weighted`` squeezes each list
into [0, 1]: both throw away how far ahead the best keyword hit is, and how close a semantic
hit comes to the best one. Here every candidate (any retriever's hit) gets every retriever's
score: each retriever with ``score_candidates`` scores the others' hits too (BM25 of a semantic
hit, the cosine of a keyword hit). Then, per candidate ``c``::

    score(c) = keyword  * sum over keyword retrievers r   of  weight_r * s_r(c) / max s_r
             + semantic * sum over semantic retrievers r  of  weight_r * (s_r(c) - max s_r) / (max s_r - mean s_r)
             + date     * (+1 if the question names a month, day or year the exchange was stored in,
                           -1 if it names another one, 0 if it names none or the time is unknown)
             + length   * ln(characters of c)

Maxima and means run over the candidates; ``weight_r`` is the member's ``weight``. The best
``max_num_results`` go into the context (ties keep the candidates' order: the first member's
first). The keyword ratio keeps how far ahead the best keyword hit is; the semantic term measures
a cosine's gap to the best in units of the candidates' spread, so one weight works for any
embedder (each has its own cosine range). The length term keeps the recalled text within budget.

A candidate *carries no signal* when it holds none of the query's words (keyword 0) and its
cosine is not at least halfway from the candidates' mean to the best (semantic under -0.5): it is
not recalled at all, however few hits are left ("What's my name?" must not bring back "My sister
Lena is coming with me."). Over a small store every candidate may be as far from the question as
the next, so the mean alone lets through whatever is a little less unrelated than the rest; a
hit found by meaning alone has to stand out.

Edge cases: a candidate a keyword retriever did not score gets 0 (it matches no query word); no
candidate matching any keyword, 0 for all. A candidate a semantic retriever did not score (not
embedded yet) gets the lowest cosine present; fewer than two scored, or no spread, 0 for all.
A retriever whose ``score_kind`` is not declared is fused as semantic.

The weights are one :class:`ScoreWeights`: the defaults are fitted on the LoCoMo dev split fed
as a persona feeds a memory, turn by turn (``benchmarks/fit_fusion.py`` writes them to
``_index/fusion_weights.py``), and the composite's ``fusion_weights`` key overrides any of
them. The date weight is not fitted but a small bonus: it reorders near-ties for a question that
names when something was said, and never outweighs the words.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ._index import dates
from ._index.fusion_weights import FITTED
from .errors import ConfigError

__all__ = [
    "carries_signal", "FEATURES", "features", "fused_scores", "KINDS", "NO_SIGNAL_BELOW", "ScoreWeights", "Signal",
]

#: The features, in the order of :meth:`ScoreWeights.vector`.
FEATURES = ("keyword", "semantic", "date", "length")
#: The semantic feature under which a candidate matching no query word carries no signal: halfway
#: from the candidates' mean (-1) to the best (0). On LoCoMo it changes no result (candidates there
#: nearly all share a word with the question); on a small store it keeps out what answers nothing.
NO_SIGNAL_BELOW = -0.5
#: How a retriever's scores are read (its class attribute ``score_kind``).
KINDS = ("keyword", "semantic")


@dataclasses.dataclass(frozen=True)
class ScoreWeights:
    """The weight of each feature (see the module docstring); defaults fitted on LoCoMo dev."""

    keyword: float = FITTED["keyword"]
    semantic: float = FITTED["semantic"]
    date: float = FITTED["date"]
    length: float = FITTED["length"]

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None, owner: str = "fusion_weights") -> ScoreWeights:
        """The defaults with ``raw``'s values; an unknown name or a value that is not a finite
        number is a :class:`ConfigError`."""
        raw = dict(raw or {})
        unknown = sorted(set(raw) - set(FEATURES))
        if unknown:
            raise ConfigError(f"{owner}: unknown weight(s) {unknown}; the features are {', '.join(FEATURES)}")
        for name, value in raw.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{owner}: '{name}' must be a finite number, got {value!r}")
        return cls(**{name: float(value) for name, value in raw.items()})

    def vector(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in FEATURES)


@dataclasses.dataclass(frozen=True)
class Signal:
    """One retriever's scores of the candidates (None: it could not score that one)."""

    kind: str
    weight: float
    scores: Sequence[float | None]


def features(signals: Sequence[Signal], texts: Sequence[str], times: Sequence[float | None],
             question: str) -> list[tuple[float, ...]]:
    """Per candidate, its features in :data:`FEATURES` order (see the module docstring).

    ``texts`` and ``times`` (POSIX seconds, None: unknown) describe the candidates; each signal
    has one score per candidate. A month named without a year is the latest one up to the newest
    candidate's time (on imported history the clock's year would be the wrong one).
    """
    n = len(texts)
    keyword, semantic = [0.0] * n, [0.0] * n
    for signal in signals:
        target = keyword if signal.kind == "keyword" else semantic
        norm = _ratio(signal.scores) if signal.kind == "keyword" else _spread(signal.scores)
        for i, value in enumerate(norm):
            target[i] += signal.weight * value
    known = [t for t in times if t is not None]
    spans = dates.periods(question, max(known) if known else None)
    return [(keyword[i], semantic[i], dates.date_match(spans, times[i]), math.log(max(len(texts[i]), 1)))
            for i in range(n)]


def fused_scores(rows: Sequence[Sequence[float]], weights: ScoreWeights) -> list[float]:
    """The weighted sum of each candidate's features."""
    w = weights.vector()
    return [sum(a * b for a, b in zip(w, row)) for row in rows]


def carries_signal(row: Sequence[float]) -> bool:
    """Whether a candidate's features (:data:`FEATURES` order) say anything for the query: a query
    word, or a cosine at least halfway from the candidates' mean to the best."""
    return row[0] > 0 or row[1] >= NO_SIGNAL_BELOW


def _ratio(scores: Sequence[float | None]) -> list[float]:
    """Keyword scores over their maximum; unscored or negative: 0 (matches nothing)."""
    values = [s if s is not None and s > 0 else 0.0 for s in scores]
    top = max(values, default=0.0)
    return [v / top for v in values] if top > 0 else [0.0] * len(values)


def _spread(scores: Sequence[float | None]) -> list[float]:
    """``(s - max) / (max - mean)``: 0 for the best, -1 on average; unscored: the lowest present."""
    known = [s for s in scores if s is not None and math.isfinite(s)]
    if len(known) < 2:
        return [0.0] * len(scores)
    floor = min(known)
    values = [s if s is not None and math.isfinite(s) else floor for s in scores]
    top, mean = max(values), sum(values) / len(values)
    if top - mean <= 1e-12:
        return [0.0] * len(values)
    return [(v - top) / (top - mean) for v in values]
