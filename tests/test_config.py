"""Typed config: defaults, errors naming the key, unknown-key warnings, no mutation."""
from __future__ import annotations

import copy
import logging

import pytest

from ovos_memory_plugins.config import check_config, parse_config
from ovos_memory_plugins.errors import ConfigError
from ovos_memory_plugins.recency import RecencyMemory
from ovos_memory_plugins.retrieval import RetrievalConfig
from ovos_memory_plugins.short_term import BasicShortTermMemory


def test_defaults_follow_the_reference():
    assert BasicShortTermMemory({}).settings.max_history == 5
    assert RecencyMemory({}).settings.max_history == 10
    c = parse_config(RetrievalConfig, {}, "x")
    assert (c.max_num_results, c.min_score, c.query_mode, c.inject_mode) == (5, None, "utterance", "system")
    assert c.chunk_prefix == "- " and c.chunk_separator == "\n\n" and c.tool_name == "search_memory"


@pytest.mark.parametrize("raw, needle", [
    ({"max_history": "ten"}, "'max_history' must be a whole number, got a string 'ten'"),
    ({"max_history": True}, "'max_history' must be a whole number, got true"),
    ({"max_history": 5.5}, "'max_history' must be a whole number, got a number 5.5"),
    ({"max_history": -2}, "'max_history' is -2; it must be >= 0"),
    ({"max_age": "soon"}, "'max_age'"),
    ({"backend": "mongodb"}, "allowed values are 'sqlite', 'json', 'memory', 'postgres'"),
    ({"backend": "postgres"}, "'backend': 'postgres' needs 'db_url'"),
    ({"db_url": "/var/lib/memory.db"}, "'db_url' must be a PostgreSQL URL"),
])
def test_bad_values_name_the_key_and_what_is_allowed(raw, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        RecencyMemory(raw)


def test_a_whole_number_written_as_a_float_and_0_or_1_for_a_switch_are_read_as_meant(tmp_path):
    # Some editors and YAML write 5.0; the reference computed with it (and with 1 for true).
    from ovos_memory_plugins.composite import CompositeMemory
    from ovos_memory_plugins.lexical import LexicalMemory

    memory = LexicalMemory({"db_path": str(tmp_path / "l.db"), "max_history": 5.0,
                            "retrieval": {"max_num_results": 3.0}, "context": {"include_sources": 1}})
    assert (memory.max_history, memory.max_num_results, memory.include_sources) == (5, 3, True)
    assert type(memory.max_history) is int and memory.include_sources is True
    with pytest.raises(ConfigError, match="'context.include_sources' must be true or false, got a whole number 2"):
        LexicalMemory({"db_path": str(tmp_path / "l.db"), "context": {"include_sources": 2}})
    composite = CompositeMemory({"members": ["ovos-memory-plugin-recency"], "rrf_k": 60.5, "member_fetch_k": 0})
    assert composite.rrf_k == 60.5 and composite.member_fetch_k == 10  # 0: the default, 2 x max_num_results
    # Fewer hits asked of a member than are recalled would leave the fused list short.
    composite = CompositeMemory({"members": ["ovos-memory-plugin-recency"], "max_num_results": 7, "member_fetch_k": 3})
    assert composite.member_fetch_k == 7


def test_null_for_a_key_that_takes_none_is_its_default_with_a_warning_and_check_config_reports_it(monkeypatch):
    from ovos_memory_plugins._core.log import LOG

    warned: list[str] = []
    monkeypatch.setattr(LOG, "warning", lambda msg, *a, **k: warned.append(str(msg)))
    memory = RecencyMemory({"max_history": None, "system_prompt": None})
    default_prompt = RecencyMemory({}).settings.system_prompt
    assert (memory.settings.max_history, memory.settings.system_prompt) == (10, default_prompt)
    assert any("'max_history' is null; its default 10 is used" in w for w in warned)
    problems = check_config(type(memory.settings), {"max_history": None}, "x")
    assert problems == ["x: 'max_history' is null; its default 10 is used"]


def test_a_choice_spelt_in_another_case_is_read_as_meant_by_every_memory_with_a_warning(monkeypatch, tmp_path):
    from ovos_memory_plugins._core.log import LOG
    from ovos_memory_plugins.longterm import LongTermMemory

    warned: list[str] = []
    monkeypatch.setattr(LOG, "warning", lambda msg, *a, **k: warned.append(str(msg)))
    for cls in (RecencyMemory, BasicShortTermMemory, LongTermMemory):
        memory = cls({"backend": " SQLite", "db_path": str(tmp_path / f"{cls.__name__}.db")})
        try:
            assert memory.settings.backend == "sqlite"
        finally:
            memory.close()
    assert sum("'backend' is ' SQLite', not one of" in w and "read as 'sqlite'" in w for w in warned) == 3
    assert parse_config(RetrievalConfig, {"query_mode": "Utterance"}, "x").query_mode == "utterance"
    # a value that is no choice in any case is still refused where there is no fallback
    with pytest.raises(ConfigError, match="allowed values are"):
        RecencyMemory({"backend": "sqlite3"})


def test_config_errors_are_value_errors_too():
    with pytest.raises(ValueError):
        RecencyMemory({"max_history": -1})


def test_unknown_keys_are_reported_with_the_closest_valid_key():
    problems = check_config(RetrievalConfig, {"max_histroy": 3, "retrieval": {"max_num_result": 2}}, "x")
    assert "unknown config key 'max_histroy'; did you mean 'max_history'?" in problems[0]
    assert "did you mean 'retrieval.max_num_results'?" in problems[1]


def test_a_group_of_keys_given_another_value_is_named_as_such_and_null_is_no_keys():
    problems = check_config(RetrievalConfig, {"context": "hdr", "retrieval": None}, "x")
    assert problems == ["x: 'context' must be an object of keys (chunk_prefix, chunk_separator, dedup_history, "
                        "header, ...), not a string 'hdr'"]


@pytest.mark.parametrize("config", [{"retrieval": 5}, {"context": "a header"}, {"retrieval": ["max_num_results"]}])
def test_a_group_of_keys_given_another_value_is_a_config_error_at_construction(config):
    from ovos_memory_plugins.lexical import LexicalMemory

    key = next(iter(config))
    with pytest.raises(ConfigError, match=f"'{key}' must be an object of keys"):
        LexicalMemory({"db_path": ":memory:", **config})


@pytest.mark.parametrize("config", ["notadict", ["max_history", 3], 5])
def test_a_config_that_is_not_a_dict_is_a_config_error(config):
    with pytest.raises(ConfigError, match="config must be a dict, not"):
        RecencyMemory(config)


def test_unknown_keys_log_a_warning_but_construction_succeeds(caplog):
    from ovos_utils.log import LOG

    LOG.create_logger("OVOS").propagate = True
    with caplog.at_level(logging.WARNING):
        m = RecencyMemory({"max_histroy": 3})
    assert m.settings.max_history == 10


def test_the_callers_config_is_never_mutated():
    raw = {"max_history": 4, "system_prompt": "hi", "nested": {"a": [1]}}
    snapshot = copy.deepcopy(raw)
    m = RecencyMemory(raw)
    m.config["system_prompt"] = "changed"
    assert raw == snapshot


def test_max_turns_counts_exchanges():
    assert RecencyMemory({"max_turns": 2}).policy.max_messages == 4


def test_a_misspelt_key_of_a_composite_member_is_named_with_the_right_one():
    from ovos_memory_plugins.composite import CompositeConfig

    problems = check_config(CompositeConfig, {"members": [
        {"module": "ovos-memory-plugin-recency", "conifg": {"max_turns": 1}},
        {"module": "ovos-memory-plugin-lexical", "wieght": 5}, "ovos-memory-plugin-entity"]}, "c")
    assert problems == ["c: unknown config key 'members[0].conifg'; did you mean 'members[0].config'?",
                        "c: unknown config key 'members[1].wieght'; did you mean 'members[1].weight'?"]


@pytest.mark.parametrize("module", ["entity", "longterm", "composite"])
@pytest.mark.parametrize("url", ["localhost:8080", "127.0.0.1:8080/v1", "ftp://host/v1"])
def test_an_endpoint_url_without_http_is_a_config_error_naming_the_fix(module, url, tmp_path):
    import importlib

    cls = {"entity": "EntityMemory", "longterm": "LongTermMemory", "composite": "CompositeMemory"}[module]
    memory_class = getattr(importlib.import_module(f"ovos_memory_plugins.{module}"), cls)
    with pytest.raises(ConfigError, match=r"'api_url' is .*starts with http:// or https://"):
        memory_class({"api_url": url, "db_path": str(tmp_path / "m.json")})


@pytest.mark.parametrize("url", [None, "", "http://localhost:8080/v1", "HTTPS://example.org/v1"])
def test_an_endpoint_url_with_http_or_none_is_accepted(url, tmp_path):
    from ovos_memory_plugins.entity import EntityMemory

    with EntityMemory({"api_url": url, "db_path": str(tmp_path / "e.json")}) as memory:
        assert memory.settings.api_url == url


@pytest.mark.parametrize("route", ["/chat/completions", "/chat/completions/", "/models"])
def test_an_endpoint_url_naming_the_chat_route_is_read_as_its_base_with_a_warning(route, tmp_path, monkeypatch):
    # A common paste; requests would have gone to .../v1/chat/completions/chat/completions.
    from ovos_memory_plugins._core.log import LOG
    from ovos_memory_plugins.entity import EntityMemory

    warned: list[str] = []
    monkeypatch.setattr(LOG, "warning", lambda msg, *a, **k: warned.append(str(msg)))
    with EntityMemory({"api_url": f"http://localhost:8080/v1{route}", "db_path": str(tmp_path / "e.json")}) as memory:
        assert memory.settings.api_url == "http://localhost:8080/v1"
    assert any("names the chat route" in w for w in warned), warned


def test_a_key_given_under_two_names_must_agree_and_an_error_names_the_key_as_written():
    import dataclasses

    from ovos_memory_plugins.config import option

    @dataclasses.dataclass(frozen=True)
    class WithAlias:
        ttl: float = option(10.0, "seconds", minimum=0, aliases=("old_ttl",))

    assert parse_config(WithAlias, {"ttl": 5, "old_ttl": 5}, "x").ttl == 5.0
    assert parse_config(WithAlias, {"old_ttl": 7}, "x").ttl == 7.0
    with pytest.raises(ConfigError, match="'ttl' is given as 'ttl' and 'old_ttl' with different values"):
        parse_config(WithAlias, {"ttl": 5, "old_ttl": 6}, "x")
    with pytest.raises(ConfigError, match="'old_ttl' is -1"):
        parse_config(WithAlias, {"old_ttl": -1}, "x")


def test_text_that_is_not_valid_unicode_anywhere_in_a_value_is_refused_naming_the_key():
    from ovos_memory_plugins.lexical import LexicalMemory
    from ovos_memory_plugins.local_rag import LocalRAGMemory

    with pytest.raises(ConfigError, match="'collection' holds text that is not valid Unicode"):
        LocalRAGMemory({"collection": "\ud800"})
    with pytest.raises(ConfigError, match="'people' holds text that is not valid Unicode"):
        LexicalMemory({"db_path": ":memory:", "scope": "person", "people": {"al\ud800": ["kitchen"]}})
