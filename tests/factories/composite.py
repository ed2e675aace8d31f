ENTRY_POINT = "ovos-memory-plugin-composite"


def make(tmp_path, overrides):
    from ovos_memory_plugins.composite import CompositeMemory

    members = [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(tmp_path / "recency.db")}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "lexical.db")}},
    ]
    return CompositeMemory({"members": members, **overrides})
