"""``FakeEmbedder``: a deterministic, instant ``TextEmbedder`` for unit tests of logic.

Each word (lower-cased Unicode letter/digit run) is hashed (sha1, not Python's salted
``hash``) onto one of ``dim`` axes with a sign; a text is the L2-normalised sum of its words.
Texts sharing words are therefore close and texts sharing none are (nearly) orthogonal, which
is enough to test ranking, filtering and plumbing without loading a model. It knows nothing
about meaning: tests of recall quality use the real embedders.

    >>> emb = FakeEmbedder()
    >>> a, b, c = (emb.get_embeddings(t) for t in ("my dog Rex", "dog Rex barks", "sunny weather"))
    >>> bool(a @ b > a @ c)
    True
"""
from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ovos_plugin_manager.templates.embeddings import TextEmbedder

__all__ = ["FakeEmbedder"]

_WORD = re.compile(r"[^\W_]+")


class FakeEmbedder(TextEmbedder):
    """Hashed bag of words. Config: ``dim`` (default 64).

    ``calls`` counts model invocations (a batch counts once) and ``texts`` the texts embedded,
    so tests can check batching and that nothing is embedded twice.
    """

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(dict(config or {}))
        self.dim = int(self.config.get("dim", 64))
        self.calls = 0
        self.texts = 0
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """Differs per ``dim``: vectors of two fakes with different dims must not be mixed."""
        return f"fake-hashed-bag-of-words-{self.dim}"

    def encode(self, texts: list[str], query: bool = False) -> Any:
        import numpy as np

        with self._lock:
            self.calls += 1
            self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text to embed must be a str, not {type(text).__name__}")
            for word in _WORD.findall(text.lower()):
                digest = hashlib.sha1(word.encode("utf-8", "replace")).digest()
                axis = int.from_bytes(digest[:4], "little") % self.dim
                out[row, axis] += 1.0 if digest[4] & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, np.float32(1e-12))

    def get_embeddings(self, text: str) -> Any:
        return self.encode([text])[0]

    def get_query_embeddings(self, text: str) -> Any:
        return self.encode([text], query=True)[0]

    def get_embeddings_batch(self, texts: Iterable[str]) -> list[Any]:
        return list(self.encode(list(texts)))
