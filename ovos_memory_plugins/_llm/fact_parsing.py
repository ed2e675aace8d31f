"""The JSON arrays in a model's reply, found within fixed bounds.

The scan is bounded: 16,384 characters, 64 failed decodes, a run of ``[`` tried once (so
``"[[[[..."`` costs one attempt), and nesting too deep for ``json`` is one more failure,
never a crash.

    >>> parse_fact_list('Sure: ["likes jazz", "likes jazz", 3, "  "] done')
    ['likes jazz']
"""
from __future__ import annotations

import json

__all__ = ["MAX_FAILED_DECODES", "MAX_SCAN_CHARS", "find_json_arrays", "parse_fact_list"]

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


def parse_fact_list(text: str) -> list[str] | None:
    """The fact strings of a model's reply; ``None`` when the reply holds no JSON array.

    Only string items with a letter or digit are kept, stripped, first occurrence wins
    (case-insensitively). An object reply such as ``{"facts": [...]}`` (JSON mode) works too.
    """
    arrays = find_json_arrays(text)
    if not arrays:
        return None
    out: list[str] = []
    seen: set[str] = set()
    for array in arrays:
        for item in array:
            if not isinstance(item, str) or not any(c.isalnum() for c in item):
                continue
            item = " ".join(item.split())
            if item.casefold() not in seen:
                seen.add(item.casefold())
                out.append(item)
    return out
