"""Token estimates without a model-specific tokenizer.

Budgets (a summary's length, a prompt against the endpoint's context) need a count close to
what the model's tokenizer makes, and no tokenizer is at hand: the model sits behind an HTTP
endpoint. Counting bytes/4 (the reference's Redis memory) or one token per word undercounts
Portuguese, Spanish or German by 20-30% and numbers by more, because byte-level BPE
vocabularies are English-heavy: "timer" is one token, "temporizador" four, and every digit is
one. So the estimate is built from the pieces a BPE pre-tokenizer cuts text into:

* each Latin-script word costs about one token, plus a share per letter beyond the third when
  the text does not read as English (how many of its words are common English words sets that
  share), plus a little per accented letter and per letter of long uncommon words and names;
* each digit, each run of punctuation (each 4 characters of a longer one) and each run of line
  breaks;
* letters of other alphabets (Cyrillic, Hebrew, Arabic, Thai) a fraction of a token each, Greek
  and Indic letters nearly one each (the vocabularies hold few of their words), characters of
  scripts written without spaces (CJK, kana, hangul) a bit under one each;
* each symbol outside ASCII (°, curly quotes, dashes, arrows, stars, emoji) about one.

The weights were fitted by least squares against the tokenizer of a current open model family
(Qwen2.5, 151k byte-level BPE) on conversational text in eight languages, and checked on text
held out of the fit. Measured (docs/design-notes.md): English +2%, Portuguese -3% on totals, and
within 15% on 95-100% of English and Portuguese samples of 20 tokens or more; a whole chat
request is within 5% once :func:`estimate_messages` adds the chat template's tokens.

    >>> estimate_tokens("Hello, world!")
    4
    >>> estimate_tokens("")
    0
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["PER_MESSAGE", "estimate_messages", "estimate_tokens", "truncate_to_tokens"]

_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+(?:'[A-Za-z]+)?")
_OTHER_LETTER = re.compile(r"[\u0400-\u052f\u0590-\u06ff\u0e00-\u0eff]")
_GREEK_INDIC = re.compile(r"[\u0370-\u03ff\u1f00-\u1fff\u0900-\u0dff]")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef\u3000-\u303f]")
# Symbols outside ASCII (°, ±, curly quotes, dashes, arrows, stars, emoji): about a token each,
# not one per run as ASCII punctuation is ("→→→" is three tokens, "!!!" one); emoji a bit more.
_SYMBOLS = "\u00a1-\u00bf\u00d7\u00f7\u2010-\u2e7f\U0001f000-\U0001faff\ufe0f"
_SYMBOL = re.compile(f"[{_SYMBOLS}]")
_EMOJI = re.compile("[\U0001f000-\U0001faff]")
_DIGIT = re.compile(r"\d")
_PUNCT = re.compile(f"[^\\w\\s\u3000-\u303f\uff00-\uffef{_SYMBOLS}]+")
_NEWLINES = re.compile(r"\n+")
_ACCENTED = re.compile(r"[\u00c0-\u024f]")
# A capitalised word inside a sentence: a name, usually split into more pieces than a common word.
_NAME = re.compile(r"(?<=[A-Za-z\u00c0-\u024f,;:]\s)([A-Z\u00c0-\u00de][a-z\u00df-\u024f]+)")


def _words(text: str) -> list[str]:
    return text.split()


# Common English words that are not also common Portuguese, Spanish, French, German or Italian ones.
_ENGLISH = frozenset(_words("""
the and is are was were you your i i'm it it's that this to of for with what my have has be been can will would
could should just about not don't we they he she on at from there their like know get got want need how when where
which who why if so but or an any some more very really than then them our me going think thanks thank please yes
okay ok hi hello good great nice time today tomorrow do does did can't i've i'll i'd you're that's what's let's
here also all out up one two by
"""))
# About 40% of the words of English chat are in _ENGLISH, 0-5% of other languages' words: a text
# with 30% or more reads as English.
_ENGLISH_SHARE = 0.30

_W_WORD = 1.04       # each Latin-script word
_W_FOREIGN = 0.16    # per letter beyond 3, weighted by how little the text reads as English
_W_ACCENT = 0.17     # per non-ASCII Latin letter
_W_RARE = 0.08       # per letter beyond 5 of a word that is not a common English word
_W_NAME = 0.08       # per letter beyond 4 of a capitalised word inside a sentence
_W_OTHER = 0.39      # per Cyrillic, Hebrew, Arabic or Thai letter
_W_GREEK_INDIC = 0.9  # per Greek or Indic letter
_W_SYMBOL = 1.0      # per symbol outside ASCII
_W_EMOJI = 0.3       # more per emoji
_W_CJK = 0.68        # per CJK, kana or hangul character (and full-width punctuation)
_W_DIGIT = 0.92      # per digit: numbers are split digit by digit
_W_PUNCT = 0.98      # per run of punctuation, and per 4 characters of a longer run (a vocabulary
#                      merges "..." or "?!" into one token, never 100,000 "[": counted as one, a
#                      reply of them passed every budget)
_W_NEWLINE = 0.05    # per run of line breaks

#: Chat templates wrap each message in a few special tokens ("<|im_start|>user\n...<|im_end|>\n").
PER_MESSAGE = 5
#: The tokens that open the reply ("<|im_start|>assistant\n").
_REPLY_PRIMER = 3
#: Templates that add a default system prompt when the request has none (Qwen's is about 20 tokens).
_DEFAULT_SYSTEM = 20


#: Estimates already made, by a 128-bit digest of the text. A budgeted turn estimates the same
#: texts turn after turn (the window's messages, the facts, an exchange recalled again), at about
#: 0.1 ms each on a small board; half of a hybrid turn's estimates were repeats (measured). Only
#: numbers are kept, never the text; the digest (about 1 µs) rather than ``hash()``, which is 32
#: bits on 32-bit boards and a subclass may override. At the bound the whole table starts again.
_ESTIMATED: dict[bytes, int] = {}
_ESTIMATED_MAX = 4096


def estimate_tokens(text: str) -> int:
    """An estimate of how many tokens a chat model's tokenizer makes of ``text``."""
    if not text:
        return 0
    if not isinstance(text, str):
        raise TypeError(f"text to estimate must be a str, not {type(text).__name__}")
    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    known = _ESTIMATED.get(key)
    if known is None:
        known = _estimate(text, text.isascii())
        if len(_ESTIMATED) >= _ESTIMATED_MAX:
            _ESTIMATED.clear()
        _ESTIMATED[key] = known
    return known


def _estimate(text: str, plain: bool) -> int:
    """The estimate; ``plain``: ``text`` is ASCII (a flag CPython keeps), so it has no accented,
    other-script or CJK letters to count."""
    words = _WORD.findall(text)
    # Lower-casing ASCII text keeps every word where it was, so its words come out lower-cased in
    # one regex pass, faster than casefolding them one by one (casefold is lower on ASCII).
    lower = _WORD.findall(text.lower()) if plain else [w.casefold() for w in words]
    english_words = rare_letters = 0
    for word in lower:
        if word in _ENGLISH:
            english_words += 1
        elif len(word) > 5:
            rare_letters += len(word) - 5
    english = min(1.0, english_words / (_ENGLISH_SHARE * len(words))) if words else 1.0
    # Text that reads as English adds nothing per letter (0.0 times the letters): not counted.
    foreign = 0.0 if english == 1.0 else _W_FOREIGN * (1.0 - english) * sum(max(0, len(w) - 3) for w in words)
    total = (_W_WORD * len(words)
             + foreign
             + _W_RARE * rare_letters
             + _W_NAME * sum(max(0, len(m) - 4) for m in _NAME.findall(text))
             + (0.0 if plain else _W_ACCENT * len(_ACCENTED.findall(text)))
             + (0.0 if plain else _W_OTHER * len(_OTHER_LETTER.findall(text)))
             + (0.0 if plain else _W_GREEK_INDIC * len(_GREEK_INDIC.findall(text)))
             + (0.0 if plain else _W_SYMBOL * len(_SYMBOL.findall(text)) + _W_EMOJI * len(_EMOJI.findall(text)))
             + (0.0 if plain else _W_CJK * len(_CJK.findall(text)))
             + _W_DIGIT * len(_DIGIT.findall(text))
             + _W_PUNCT * sum((len(run) + 3) // 4 for run in _PUNCT.findall(text))
             + (_W_NEWLINE * len(_NEWLINES.findall(text)) if "\n" in text else 0.0))
    return max(1, round(total))


def estimate_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """Estimated prompt tokens of a chat request: the contents plus the chat template's tokens.

    What a context budget must count: the template adds about :data:`PER_MESSAGE` tokens per
    message, the reply's opening, and, in some templates, a default system prompt.
    """
    total, system = _REPLY_PRIMER, False
    for message in messages:
        total += estimate_tokens(str(message.get("content") or "")) + PER_MESSAGE
        system = system or message.get("role") == "system"
    return total if system else total + _DEFAULT_SYSTEM


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` (cut at a word boundary) within ``max_tokens``."""
    if estimate_tokens(text) <= max_tokens:
        return text
    if max_tokens <= 0:
        return ""
    # Estimates are not additive word by word (the English share is per text), so search the
    # cut point over word ends: the estimate grows with the prefix.
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    plain = text.isascii()
    lo, hi = 0, len(ends)  # invariant: the prefix of lo words fits (0 words always does)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _estimate(text[:ends[mid - 1]], plain) <= max_tokens:  # prefixes: never seen again, not kept
            lo = mid
        else:
            hi = mid - 1
    return text[:ends[lo - 1]].rstrip() if lo else ""
