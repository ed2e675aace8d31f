"""The indexes behind recall: keyword postings (in RAM, and their PostgreSQL twin), BM25 scoring,
stop words, neighbouring exchanges, dates named in questions, the vector matrix and the calls to a
vector store, what is pending indexing, and the fitted weights of score fusion. The documents
themselves live in :mod:`ovos_memory_plugins.storage` (the document log and the retrieval store)."""
