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
    ({"max_history": "ten"}, "'max_history' must be int"),
    ({"max_history": True}, "'max_history' must be int"),
    ({"max_history": -2}, "'max_history' is -2; it must be >= 0"),
    ({"max_age": "soon"}, "'max_age'"),
    ({"backend": "mongodb"}, "allowed values are 'sqlite', 'json', 'memory', 'postgres'"),
    ({"backend": "postgres"}, "'backend': 'postgres' needs 'db_url'"),
    ({"db_url": "/var/lib/memory.db"}, "'db_url' must be a PostgreSQL URL"),
])
def test_bad_values_name_the_key_and_what_is_allowed(raw, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        RecencyMemory(raw)


def test_config_errors_are_value_errors_too():
    with pytest.raises(ValueError):
        RecencyMemory({"max_history": -1})


def test_unknown_keys_are_reported_with_the_closest_valid_key():
    problems = check_config(RetrievalConfig, {"max_histroy": 3, "retrieval": {"max_num_result": 2}}, "x")
    assert "unknown config key 'max_histroy'; did you mean 'max_history'?" in problems[0]
    assert "did you mean 'retrieval.max_num_results'?" in problems[1]


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
