ENTRY_POINT = "ovos-memory-plugin-recency"


def make(tmp_path, overrides):
    from ovos_memory_plugins.recency import RecencyMemory

    return RecencyMemory({"db_path": str(tmp_path / "recency.db"), **overrides})
