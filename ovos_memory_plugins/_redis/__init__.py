"""The Redis side of ``RedisMemory``: the store and its scripts, the compaction lease and policy."""
