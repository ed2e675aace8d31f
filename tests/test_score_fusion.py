"""Score fusion's pure parts: the dates a question names, the features and the weights."""
from __future__ import annotations

import datetime as dt
import importlib.util
import math
from pathlib import Path

import pytest

from ovos_memory_plugins._index import dates
from ovos_memory_plugins._index.fusion_weights import FITTED
from ovos_memory_plugins.errors import ConfigError
from ovos_memory_plugins.score_fusion import FEATURES, ScoreWeights, Signal, features, fused_scores

NOW = dt.datetime(2023, 8, 20, tzinfo=dt.timezone.utc).timestamp()


def days_of(spans: list[tuple[float, float]]) -> list[tuple[str, str]]:
    def iso(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).date().isoformat()
    return [(iso(a), iso(b)) for a, b in spans]


def days(text: str, now: float | None = NOW) -> list[tuple[str, str]]:
    return days_of(dates.periods(text, now))


@pytest.mark.parametrize(("text", "expected"), [
    ("What did Gina find on 1 February, 2023?", [("2023-02-01", "2023-02-02")]),
    ("What happened on May 23, 2023?", [("2023-05-23", "2023-05-24")]),
    ("on the 7th of July 2023", [("2023-07-07", "2023-07-08")]),
    ("¿Qué hizo el 7 de julio de 2023?", [("2023-07-07", "2023-07-08")]),
    ("Was hat sie im Oktober 2023 gemacht?", [("2023-10-01", "2023-11-01")]),
    ("Qu'a-t-elle fait en février 2023 ?", [("2023-02-01", "2023-03-01")]),
    ("O que fez em março de 2022?", [("2022-03-01", "2022-04-01")]),
    ("Cosa ha fatto a dicembre?", [("2022-12-01", "2023-01-01")]),  # the latest December up to now
    ("Wat deed ze in maart?", [("2023-03-01", "2023-04-01")]),
    ("Què va fer al juliol?", [("2023-07-01", "2023-08-01")]),
    ("When did Melanie go camping in June?", [("2023-06-01", "2023-07-01")]),
    ("the meeting on 2023-07-07", [("2023-07-07", "2023-07-08")]),
    ("anything in 2022?", [("2022-01-01", "2023-01-01")]),
    ("in June and in 2021", [("2021-06-01", "2021-07-01"), ("2021-01-01", "2022-01-01")]),  # the year named
])
def test_periods_are_read_in_the_stopword_languages(text, expected):
    assert days(text) == expected


@pytest.mark.parametrize("text", ["you may know", "el mar estaba frío", "non ci vado mai", "life on Mars",
                                  "what did Marc say", "call me at 7/7", "in 1850", ""])
def test_words_that_only_look_like_dates_name_none(text):
    assert dates.periods(text, NOW) == []


def test_an_ambiguous_name_next_to_a_day_or_year_is_a_month():
    assert days("on May 3") == [("2023-05-03", "2023-05-04")]
    assert days("3 mai 2023") == [("2023-05-03", "2023-05-04")]


def test_a_month_without_year_needs_a_now():
    assert dates.periods("in June", None) == []


def test_an_impossible_day_still_names_its_month():
    assert days("the 31 June party") == [("2023-06-01", "2023-07-01")]


def test_date_match_is_plus_one_inside_minus_one_outside_zero_otherwise():
    june = dates.periods("in June", NOW)
    inside = dt.datetime(2023, 6, 12, tzinfo=dt.timezone.utc).timestamp()
    assert dates.date_match(june, inside) == 1.0
    assert dates.date_match(june, inside + 40 * dates.DAY) == -1.0
    assert dates.date_match([], inside) == 0.0 and dates.date_match(june, None) == 0.0


# -- features ---------------------------------------------------------------------------------
TEXTS = ["Q: a\nA: b", "Q: longer text here\nA: with an answer", "Q: c"]


def test_features_keyword_is_the_ratio_to_the_best_and_semantic_the_gap_in_spreads():
    rows = features([Signal("keyword", 1.0, [8.0, 2.0, None]), Signal("semantic", 1.0, [0.80, 0.86, 0.83])],
                    TEXTS, [None, None, None], "anything")
    keyword, semantic = [r[0] for r in rows], [r[1] for r in rows]
    assert keyword == [1.0, 0.25, 0.0]  # not scored by the keyword retriever: matches nothing
    spread = 0.86 - (0.80 + 0.86 + 0.83) / 3
    assert semantic == pytest.approx([(0.80 - 0.86) / spread, 0.0, (0.83 - 0.86) / spread])
    assert [r[3] for r in rows] == [math.log(len(t)) for t in TEXTS]


def test_features_edge_cases():
    # No keyword hit at all, a candidate without a vector (the lowest present), no dates.
    rows = features([Signal("keyword", 1.0, [0.0, None, 0.0]), Signal("semantic", 1.0, [0.9, None, 0.7])],
                    TEXTS, [None, None, None], "in June")
    assert [r[0] for r in rows] == [0.0, 0.0, 0.0]
    assert rows[1][1] == rows[2][1] < 0 and rows[0][1] == 0.0
    assert [r[2] for r in rows] == [0.0, 0.0, 0.0]  # no times: the date says nothing
    # A single candidate: every signal at its best.
    (only,) = features([Signal("keyword", 1.0, [3.0]), Signal("semantic", 1.0, [0.5])], ["x"], [NOW], "q")
    assert only[:3] == (1.0, 0.0, 0.0)
    # Equal cosines: no spread, no semantic signal.
    rows = features([Signal("semantic", 1.0, [0.5, 0.5])], ["x", "y"], [None, None], "q")
    assert [r[1] for r in rows] == [0.0, 0.0]


def test_features_date_compares_with_the_newest_candidate_as_now():
    june = dt.datetime(2023, 6, 10, tzinfo=dt.timezone.utc).timestamp()
    august = dt.datetime(2023, 8, 1, tzinfo=dt.timezone.utc).timestamp()
    rows = features([], ["a", "b", "c"], [june, august, None], "what happened in June?")
    assert [r[2] for r in rows] == [1.0, -1.0, 0.0]


def test_member_weights_scale_their_signal():
    rows = features([Signal("keyword", 2.0, [4.0, 1.0]), Signal("keyword", 1.0, [0.0, 5.0])], ["a", "b"],
                    [None, None], "q")
    assert [r[0] for r in rows] == [2.0, 1.5]


def test_fused_scores_are_the_weighted_sum():
    weights = ScoreWeights(keyword=1.0, semantic=0.5, date=2.0, length=-0.1)
    assert fused_scores([(1.0, -1.0, 1.0, 2.0)], weights) == [pytest.approx(1.0 - 0.5 + 2.0 - 0.2)]


# -- weights ----------------------------------------------------------------------------------
def test_the_defaults_are_the_fitted_weights():
    assert ScoreWeights().vector() == tuple(FITTED[name] for name in FEATURES)
    assert ScoreWeights.from_config({"date": 1.5}) == ScoreWeights(date=1.5)


@pytest.mark.parametrize("bad", [{"bm25": 1.0}, {"keyword": "high"}, {"date": float("nan")}, {"length": True}])
def test_a_bad_weight_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="fusion_weights"):
        ScoreWeights.from_config(bad)


def test_the_shipped_weights_file_is_what_the_fitting_script_writes():
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    spec = importlib.util.spec_from_file_location("fit_fusion_for_test", bench / "fit_fusion.py")
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.path.insert(0, str(bench))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    assert module.WEIGHTS_FILE.read_text(encoding="utf-8") == module.render_weights(dict(FITTED))


def test_a_text_of_thousands_of_years_reads_a_bounded_number_of_mentions(monkeypatch):
    # Counted, not timed: each mention read builds its period, so the periods built are the work.
    built: list[tuple[int, ...]] = []
    real_ts = dates._ts
    monkeypatch.setattr(dates, "_ts", lambda *args: built.append(args) or real_ts(*args))
    spans = dates.periods("2023 " * 20_000, NOW)
    assert days_of(spans) == [("2023-01-01", "2024-01-01")]  # one period, named 20,000 times
    assert len(built) <= 2 * dates.MAX_MENTIONS


def test_a_text_naming_many_dates_gives_at_most_max_mentions_periods():
    text = " ".join(f"on {day} July 2023 and" for day in range(1, 29)) * 10
    spans = dates.periods(text, NOW)
    assert 0 < len(spans) <= dates.MAX_MENTIONS
    assert days_of(spans)[0] == ("2023-07-01", "2023-07-02")
