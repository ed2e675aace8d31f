ENTRY_POINT = "ovos-memory-plugin-lexical"


def make(tmp_path, overrides):
    from ovos_memory_plugins.lexical import LexicalMemory

    return LexicalMemory({"db_path": str(tmp_path / "lexical.db"), **overrides})
