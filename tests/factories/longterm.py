"""LongTermMemory for the contract suite: a JSON file in tmp_path, and an endpoint that refuses
connections at once (a free port on 127.0.0.1), so no test waits on the network."""
ENTRY_POINT = "ovos-memory-plugin-longterm"


def make(tmp_path, overrides):
    from ovos_memory_plugins.longterm import LongTermMemory
    from ovos_memory_plugins.testing.llm import closed_port_url

    config = {"db_path": str(tmp_path / "longterm.json"), "api_url": closed_port_url(), "request_timeout": 2}
    return LongTermMemory({**config, **overrides})
