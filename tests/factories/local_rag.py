ENTRY_POINT = "ovos-memory-plugin-local-rag"


def make(tmp_path, overrides):
    # The fake embedder keeps the contract suite fast; tests/test_local_rag.py covers the real model.
    from ovos_memory_plugins.local_rag import LocalRAGMemory
    from ovos_memory_plugins.testing.embeddings import FakeEmbedder

    return LocalRAGMemory({"db_path": str(tmp_path / "local_rag.db"), "_embedder": FakeEmbedder(), **overrides})
