ENTRY_POINT = "ovos-memory-plugin-redis"


def make(tmp_path, overrides):
    import uuid

    from ovos_memory_plugins.redis_memory import RedisMemory
    from tests._redis import server_url

    # A unique prefix per memory: tests share one server and never see each other's keys. Short
    # TTLs: what the contract suite leaves behind on a long-lived server expires within the hour.
    return RedisMemory({"url": server_url(), "prefix": f"test:{uuid.uuid4().hex}", "api_url": None,
                        "short_term_ttl": 3600, "long_term_ttl": 3600, **overrides})
