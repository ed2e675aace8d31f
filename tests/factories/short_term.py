ENTRY_POINT = "ovos-memory-plugin-short-term"


def make(tmp_path, overrides):
    from ovos_memory_plugins.short_term import BasicShortTermMemory

    return BasicShortTermMemory({"db_path": str(tmp_path / "short_term.db"), **overrides})
