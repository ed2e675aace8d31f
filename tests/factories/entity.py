"""EntityMemory for the contract suite: a JSON file in tmp_path, and an endpoint that refuses
connections at once (a free port on 127.0.0.1), so facts come from the offline rules."""
ENTRY_POINT = "ovos-memory-plugin-entity"


def make(tmp_path, overrides):
    from ovos_memory_plugins.entity import EntityMemory
    from ovos_memory_plugins.testing.llm import closed_port_url

    config = {"db_path": str(tmp_path / "entity.json"), "api_url": closed_port_url(), "request_timeout": 2}
    return EntityMemory({**config, **overrides})
