"""The facts in a model's reply, found within fixed bounds, whole or cut off.

The scan is bounded: 16,384 characters, 64 failed decodes, a run of ``[`` tried once (so
``"[[[[..."`` costs one attempt), and nesting too deep for ``json`` is one more failure,
never a crash.

A reply cut by ``max_tokens`` (or by the model's context) is not thrown away: its open strings,
arrays and objects are closed, and every complete item it holds is kept. The last item is kept
only if it is whole: an object with its value, or a string that ends like a sentence.

    >>> fact_strings('Sure: ["likes jazz", "likes jazz", 3, "  "] done')
    ['likes jazz']
    >>> fact_strings('["User is a nurse", "I moved from Lisbon to Porto last week.')
    ['User is a nurse', 'I moved from Lisbon to Porto last week.']
    >>> parse_items('{"facts": [{"attribute": "name", "value": "Marta"}, {"attribute": "home_ci')
    ([{'attribute': 'name', 'value': 'Marta'}], True)
"""
from __future__ import annotations

import ast
import itertools
import json
import re
from typing import Any

from ...messages import without_surrogates

__all__ = ["MAX_FAILED_DECODES", "MAX_SCAN_CHARS", "close_json", "fact_strings", "find_json_arrays", "json_object",
           "parse_items", "reply_items"]

#: Only the start of a reply is scanned (as the reference): a fact list is short.
MAX_SCAN_CHARS = 16_384
#: Give up after this many candidate arrays that do not decode.
MAX_FAILED_DECODES = 64

_DECODER = json.JSONDecoder()


def find_json_arrays(text: str, max_chars: int = MAX_SCAN_CHARS,
                     max_failures: int = MAX_FAILED_DECODES) -> list[list[object]]:
    """Every top-level JSON array in the first ``max_chars`` of ``text``, in order.

    Each ``[`` is decoded in place; a run of ``[`` is tried once, from its last bracket (so
    ``[["a"]]`` gives ``["a"]`` and ``"[[[[..."`` costs one attempt); a decode that fails,
    including by nesting too deep for ``json``, counts towards ``max_failures``. Work is thus
    bounded by ``max_chars`` times the number of attempts, whatever the input.
    """
    text = text[:max_chars]
    found: list[list[object]] = []
    failures = 0
    i = 0
    while len(found) < max_failures:
        start = text.find("[", i)
        if start < 0:
            break
        while start + 1 < len(text) and text[start + 1] == "[":
            start += 1
        try:
            value, end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            failures += 1
            if failures >= max_failures:
                break
            i = start + 1
            continue
        found.append(value)
        i = end
    return found


# -- replies cut off ----------------------------------------------------------------------------
_ITEM_KEYS = ("facts", "items", "data", "result")
#: Keys under which an object item holds a fact sentence ({"fact": "User likes jazz"}).
_TEXT_KEYS = ("fact", "text", "statement", "sentence", "content")
_SENTENCE_END = re.compile(r"[.!?]$")


def close_json(text: str) -> str:
    """``text`` with its open string, arrays and objects closed (a dangling ``,`` or ``:`` dropped)."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}" and stack:
            stack.pop()
    out = text + ('"' if in_string else "")
    out = re.sub(r"[,:]\s*$", "", out)
    return out + "".join(reversed(stack))


def _items_of(value: Any) -> list[Any]:
    """The items of a decoded reply: a list, or the list an object holds under a usual key, else
    under any key ({"user_facts": [...]}); an object that is itself one item."""
    if isinstance(value, dict):
        for key in _ITEM_KEYS:
            if isinstance(value.get(key), list):
                return list(value[key])
        if {"attribute", "value"} <= set(value):
            return [value]
        lists = [v for v in value.values() if isinstance(v, list)]
        if lists:
            return [item for found in lists for item in found]
        texts = [v for k, v in value.items() if k in _TEXT_KEYS and isinstance(v, str)]
        return texts[:1]
    return list(value) if isinstance(value, list) else []


def parse_items(reply: str, max_chars: int = MAX_SCAN_CHARS,
                max_failures: int = MAX_FAILED_DECODES) -> tuple[list[Any], bool]:
    """``(items, cut)``: the fact items of a JSON reply (objects or strings) and whether it was cut
    (``([], False)``: no JSON at all).

    A whole reply is an object holding a list (``{"facts": [...]}``) or a list. A cut reply is
    closed and decoded; failing that, ever shorter prefixes ending after a complete value are
    tried (at most ``max_failures``). Of what decodes, a last string cut mid-way is dropped
    unless it ends like a sentence, and a last object cut mid-way or without its value is dropped.
    """
    text = (reply or "")[:max_chars]
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return [], False
    body = text[min(starts):]
    try:
        return _items_of(_DECODER.raw_decode(body)[0]), False
    except (ValueError, RecursionError):
        pass
    ends = [len(body)] + [i + 1 for i in range(len(body) - 1, -1, -1) if body[i] in '}]"'][: max_failures - 1]
    for end in ends:
        closed = close_json(body[:end])
        try:
            value = _DECODER.raw_decode(closed)[0]
        except (ValueError, RecursionError):
            continue
        items = _items_of(value)
        if items and _cut_inside(items[-1], closed, body[:end]):
            items.pop()
        return items, True
    return [], False


def json_object(reply: str, max_chars: int = MAX_SCAN_CHARS) -> dict[str, Any] | None:
    """The JSON object a reply opens with (after any text before it), whole, else None."""
    text = (reply or "")[:max_chars]
    start = text.find("{")
    if start < 0 or 0 <= text.find("[") < start:
        return None
    try:
        value = _DECODER.raw_decode(text[start:])[0]
    except (ValueError, RecursionError):
        return None
    return _valid(value) if isinstance(value, dict) else None


def _valid(value: Any) -> Any:
    """``value`` with its strings valid UTF-8: JSON may escape a lone surrogate ("\\ud800"),
    which no store can write; kept, one such fact made every retry of its exchange fail. (The
    reply's own text has none: the client drops them.)"""
    if isinstance(value, str):
        return without_surrogates(value)
    if isinstance(value, list):
        return [_valid(item) for item in value]
    if isinstance(value, dict):
        return {_valid(k): _valid(v) for k, v in value.items()}
    return value


def _cut_inside(last: Any, closed: str, prefix: str) -> bool:
    """Whether the last item was cut before it was whole."""
    cut_in_string = closed.startswith(prefix + '"')
    if isinstance(last, str):
        return cut_in_string and not _SENTENCE_END.search(last.strip())
    if isinstance(last, dict):
        return cut_in_string or not {"attribute", "value"} <= set(last)
    return False


# -- any reply shape ---------------------------------------------------------------------------------
_SENTENCES = re.compile(r"(?<=[.!?])\s+(?=[A-Z\u00c0-\u00de])")
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)])\s+")
_NOT_A_FACT_LINE = re.compile(r"^\s*(?:```|#|\{|\}|\[|\])|:\s*$")


def reply_items(reply: str) -> list[Any]:
    """The items of a fact reply, whatever its shape: objects (``{"facts": [{...}]}``), a JSON
    array of fact strings (every top-level array, as the reference reads them), a list under any
    key, an object per fact sentence (``{"fact": "..."}`` becomes the sentence), or else one
    fact per line or sentence (bullets and numbers removed, headers such as "Facts:" skipped).

        >>> reply_items('["User likes jazz"] and ["User is Ana"]')
        ['User likes jazz', 'User is Ana']
        >>> reply_items('[[["User likes tea"]')
        ['User likes tea']
        >>> reply_items('- User likes jazz\\n2. User lives in Porto')
        ['User likes jazz', 'User lives in Porto']
    """
    text = (reply or "")[:MAX_SCAN_CHARS]
    items, cut = parse_items(text)
    arrays = find_json_arrays(text)
    # A cut reply's repair wins, unless it holds nothing usable ('[[["User likes tea"]': the
    # whole array in it is what the reference read).
    usable = any(isinstance(item, (str, dict)) for item in items)
    if (not cut or not usable) and arrays and text.lstrip()[:1] != "{":
        items = [item for array in arrays for item in array]
    if (not items or cut) and "[" in text:
        # Nothing, or a repair of a list JSON could not read whole: a list written almost as JSON
        # (typographic quotes among straight ones) may hold more.
        loose = _loose_list(text)
        items = loose if len(loose) > len(items) else items
    if items or "[" in text or "{" in text:
        return [_sentence_of(item) for item in _valid(items)]
    lines = [_BULLET.sub("", raw).strip() for raw in text.splitlines()]
    # Prose ("Sure! The user likes fado.") is read sentence by sentence: the filler fails the checks alone.
    return [part for line in lines if line and not _NOT_A_FACT_LINE.search(line) for part in _SENTENCES.split(line)]


# Quotes a model may write instead of JSON's: typographic and angle quotes around a string, and
# typographic single quotes (tried last: one is also an apostrophe, "User’s dog").
_DOUBLE_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u00ab": '"', "\u00bb": '"'})
_SINGLE_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'"})
_PYTHON_LIST = re.compile(r"\[[^\[\]]*\]")
#: Bracketed spans of a reply tried as a loose list, at most.
MAX_LOOSE_LISTS = 8


def _loose_list(text: str) -> list[Any]:
    """The strings of the first list a model wrote almost as JSON: typographic quotes, or a
    Python list (``['User likes jazz']``), read as a literal (never run); [] for any other."""
    for found in itertools.islice(_PYTHON_LIST.finditer(text), MAX_LOOSE_LISTS):
        doubled = found.group().translate(_DOUBLE_QUOTES)
        for candidate in (found.group(), doubled, doubled.translate(_SINGLE_QUOTES)):
            for parse in (json.loads, ast.literal_eval):
                try:
                    value = parse(candidate)
                except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
                    continue
                strings = [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
                if strings:
                    return strings
        strings = _typographic_strings(doubled)
        if strings:
            return strings
    return []


# A typographic closing single quote that ends a list item: before a comma or the closing bracket.
_ITEM_CLOSE = re.compile(r"\u2019(?=[^\S\n]*[,\]])")


def _typographic_strings(span: str) -> list[str]:
    """The items of a list in typographic single quotes whose closing quote is also an apostrophe
    inside an item (``[‘User’s dog’]``, which no quote swap makes a literal): an item runs from a
    ‘ to the ’ before a comma or the bracket. Linear: each closing quote is looked at once."""
    items, at = [], 0
    for close in _ITEM_CLOSE.finditer(span):
        start = span.find("\u2018", at, close.start())
        if start >= 0 and span[start + 1:close.start()].strip():
            items.append(span[start + 1:close.start()])
        at = close.end()
    return items


def _sentence_of(item: Any) -> Any:
    if isinstance(item, dict) and not {"attribute", "value"} <= set(item):
        texts = [v for k, v in item.items() if k in _TEXT_KEYS and isinstance(v, str)]
        return texts[0] if texts else item
    return item


def fact_strings(reply: str) -> list[str]:
    """The fact sentences of a reply of any shape (:func:`reply_items`): strings with a letter or
    digit, whitespace collapsed, each once (case-insensitively, first kept).

        >>> fact_strings('Sure: ["likes jazz", "Likes  jazz", 3, "  "] done')
        ['likes jazz']
    """
    out: dict[str, str] = {}
    for item in reply_items(reply):
        if isinstance(item, str) and any(c.isalnum() for c in item):
            text = " ".join(item.split())
            out.setdefault(text.casefold(), text)
    return list(out.values())
