"""What a user gets wrong is refused clearly, and destroys nothing: wrong store paths and commands.

* a store path that is a device, a FIFO, a socket or a directory is a ConfigError at
  construction, and the node is left exactly as it was (a device is made with mknod in a
  temporary folder, never the real ``/dev/null``);
* ``db_path: ""`` means the default, for every backend;
* a read-only command (``sessions``, ``stats``, ``show``, ``export``, ``search``) changes no file,
  and refuses a file that is not a store instead of starting one in its place.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from ovos_memory_plugins.errors import ConfigError
from tests._timing import patience
from tests.reliability._harness import exchange, make_memory, marker, namespaced, spec_for, store_cases, views
from tests.reliability._report import record

#: Backends and store kinds that take a path: (name, entry point, overrides besides db_path).
PATH_CASES = [
    ("ovos-memory-plugin-recency", "ovos-memory-plugin-recency", {}),
    ("ovos-memory-plugin-recency (json)", "ovos-memory-plugin-recency", {"backend": "json"}),
    ("ovos-memory-plugin-short-term", "ovos-memory-plugin-short-term", {}),
    ("ovos-memory-plugin-lexical", "ovos-memory-plugin-lexical", {}),
    ("ovos-memory-plugin-local-rag", "ovos-memory-plugin-local-rag", {}),
    ("ovos-memory-plugin-longterm", "ovos-memory-plugin-longterm", {}),
    ("ovos-memory-plugin-longterm (sqlite)", "ovos-memory-plugin-longterm", {"backend": "sqlite"}),
    ("ovos-memory-plugin-entity", "ovos-memory-plugin-entity", {}),
    ("ovos-memory-plugin-entity (sqlite)", "ovos-memory-plugin-entity", {"backend": "sqlite"}),
]


def _make_node(kind: str, path: Path) -> Any:
    """A node of ``kind`` at ``path``; returns what must be closed afterwards (a socket), if anything."""
    if kind == "character device":
        try:  # the same device numbers as /dev/null, made here: the real one is never touched
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs CAP_MKNOD (root); the FIFO case runs the same check")
    elif kind == "FIFO":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        return sock
    elif kind == "directory":
        path.mkdir()
    return None


def _tree(folder: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under ``folder``: (mode, inode, device numbers, sha256 of a regular file's bytes)."""
    out = {}
    for entry in sorted(folder.rglob("*")):
        st = os.lstat(entry)
        digest = hashlib.sha256(entry.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
        out[str(entry.relative_to(folder))] = (st.st_mode, st.st_ino, st.st_rdev, digest)
    return out


#: Each path key a backend opens a store at: (name, entry point, overrides, key).
NODE_CASES = [(*case, "db_path") for case in PATH_CASES] + [
    ("ovos-memory-plugin-local-rag (vector store)", "ovos-memory-plugin-local-rag", {}, "embeddings_db_config.path")]


@pytest.mark.parametrize("kind", ["character device", "FIFO", "socket", "directory"])
@pytest.mark.parametrize(("name", "entry_point", "overrides", "key"), NODE_CASES, ids=[c[0] for c in NODE_CASES])
def test_a_store_path_that_is_not_a_regular_file_is_refused_and_left_alone(name, entry_point, overrides, key, kind,
                                                                            tmp_path):
    from ovos_memory_plugins._cli.check import config_problems

    folder = tmp_path / "dev"
    folder.mkdir()
    node = folder / "null"
    keep = _make_node(kind, node)
    before = _tree(folder)
    config = {**overrides, **_nested(key, str(node))}
    try:
        with pytest.raises(ConfigError) as caught:
            make_memory(entry_point, tmp_path / "store", config).close()
        problems = config_problems(entry_point, config)
    finally:
        if keep is not None:
            keep.close()
    after = _tree(folder)
    message = str(caught.value)
    assert str(node) in message and kind in message, f"the error does not say what is wrong: {message}"
    assert any(f"'{key}'" in p for p in problems), f"check-config calls it valid: {problems}"
    assert after == before, f"the store touched the {kind} or its folder: {before} -> {after}"
    record("misuse", (f"{key} is a device, a FIFO, a socket or a directory", name), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


@pytest.mark.parametrize(("name", "entry_point", "overrides", "key"), NODE_CASES, ids=[c[0] for c in NODE_CASES])
def test_a_store_file_another_user_planted_in_a_shared_folder_is_refused_and_left_alone(name, entry_point,
                                                                                       overrides, key, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root; CI runs as root")
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: every user may create files here
    planted = shared / "memory.db"
    planted.touch()
    planted.chmod(0o666)
    os.chown(planted, 65534, 65534)  # nobody's, made before the store starts
    before = _tree(shared)
    config = {**overrides, **_nested(key, str(planted))}
    with pytest.raises(ConfigError, match="belongs to another user") as caught:
        make_memory(entry_point, tmp_path / "store", config).close()
    assert str(planted) in str(caught.value)
    assert _tree(shared) == before, "the store wrote to the planted file, or beside it"
    # Root running on a person's own folder (not writable by every user) uses their file.
    own = tmp_path / "home"
    own.mkdir()
    config = {**overrides, **_nested(key, str(own / "memory.db"))}
    make_memory(entry_point, tmp_path / "store2", config).close()
    for entry in [own, *own.rglob("*")]:
        os.chown(entry, 65534, 65534)
    make_memory(entry_point, tmp_path / "store2", config).close()
    record("misuse", (f"{key} is another user's file in a folder every user may write", name), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


def test_quarantine_never_moves_what_is_not_a_regular_file(tmp_path):
    from ovos_memory_plugins._core.paths import quarantine_file
    from ovos_memory_plugins.errors import StorageError

    fifo = tmp_path / "store.json"
    os.mkfifo(fifo)
    with pytest.raises(StorageError):
        quarantine_file(str(fifo))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and not list(tmp_path.glob("*.corrupt*"))


@pytest.mark.parametrize(("name", "entry_point", "overrides"), PATH_CASES, ids=[c[0] for c in PATH_CASES])
def test_an_empty_db_path_means_the_default(name, entry_point, overrides, tmp_path):
    data_home = Path(os.environ["XDG_DATA_HOME"])
    memory = make_memory(entry_point, tmp_path / "store", {**overrides, "db_path": ""})
    try:
        memory.update_history(exchange("e", 1), "s")
        if hasattr(memory, "flush"):
            memory.flush(patience(30))
        kept = views(memory.export("s"))
    finally:
        memory.close()
    data_dir = data_home / "ovos"
    assert not data_dir.exists() or data_dir.is_dir(), "the data directory was turned into a file"
    assert all(counts[marker("e", 1)] == 1 for counts in kept.values()), kept
    # ... and every backend using the default location still starts afterwards.
    for other in ("ovos-memory-plugin-lexical", "ovos-memory-plugin-longterm"):
        make_memory(other, tmp_path / "other", {"db_path": ""}).close()
    record("misuse", ("db_path is \"\"", name), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


# -- read-only commands ---------------------------------------------------------------------------
READ_ONLY_CASES = [(name, ep, variant) for name, ep, variant in store_cases() if not ep.endswith("redis")]


def _populated(entry_point: str, folder: Path, config: dict) -> None:
    with make_memory(entry_point, folder, config) as memory:
        for n in range(3):
            memory.update_history(exchange("ro", n), "s")
        memory.flush(patience(30))


@pytest.mark.parametrize(("name", "entry_point", "variant"), READ_ONLY_CASES, ids=[c[0] for c in READ_ONLY_CASES])
def test_a_memory_opened_read_only_changes_no_file_and_still_answers(name, entry_point, variant, tmp_path):
    from ovos_memory_plugins.storage import read_only

    folder = tmp_path / "store"
    config = {**spec_for(entry_point).keep_all, **variant}
    _populated(entry_point, folder, config)
    before = _tree(folder)
    with read_only():
        memory = make_memory(entry_point, folder, config)
        try:
            listed = memory.sessions()
            exported = memory.export("s")
            memory.get_history("s")
            if hasattr(memory, "search"):
                memory.search(marker("ro", 1), "s")
        finally:
            memory.close()
    after = _tree(folder)
    found = {m for counts in views(exported).values() for m in counts}
    assert listed == ["s"] and {marker("ro", n) for n in range(3)} <= found
    assert after == before, f"a read-only open changed the store: {sorted(set(after) ^ set(before))} " \
                            f"{[k for k in after if k in before and after[k] != before[k]]}"
    record("misuse", ("opened read-only (sessions, export, history, search)", name), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


CLI_READ_ONLY = [["sessions"], ["stats"], ["show", "s"], ["export", "s"], ["export", "--all"]]
CLI_BACKENDS = ["ovos-memory-plugin-recency", "ovos-memory-plugin-short-term", "ovos-memory-plugin-lexical",
                "ovos-memory-plugin-local-rag", "ovos-memory-plugin-longterm", "ovos-memory-plugin-entity"]


@pytest.mark.parametrize("entry_point", CLI_BACKENDS)
def test_a_read_only_command_refuses_a_file_that_is_not_a_store_and_leaves_it_alone(entry_point, tmp_path, capsys):
    from ovos_memory_plugins.cli import main

    export = tmp_path / "export.json"  # what 'ovos-memory export --all' wrote, passed as a store by mistake
    export.write_text(json.dumps({"plugin": entry_point, "sessions": [{"session_id": "s", "window": []}]}))
    garbage = tmp_path / "notes.db"
    garbage.write_bytes(b"shopping list: milk, eggs\n" * 40)
    before = _tree(tmp_path)
    refused = 0
    for path in (export, garbage):
        for command in CLI_READ_ONLY:
            code = main([*command, "--module", entry_point, "--config", json.dumps({"db_path": str(path)})])
            err = capsys.readouterr().err.strip()
            assert code != 0, f"{command} on {path.name} succeeded"
            assert err.count("\n") == 0 and str(path) in err, f"not one line naming the file: {err!r}"
            refused += 1
    after = _tree(tmp_path)
    assert after == before, f"a read-only command changed files: {sorted(set(after) ^ set(before))}"
    record("misuse", ("read-only command on a file that is not a store", entry_point), tried=refused, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


SOMEONES_TEXT = {
    "passwd": b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n",
    "notes.db": b"shopping list: milk, eggs\n" * 40,
    "script.sh": b"#!/bin/sh\necho hello\n",
    "settings.json": b"volume: 3\nvoice: en-gb\n",  # YAML, named .json
    "utf8.txt": "caf\u00e9 \u2014 \u00fcber, \u65e5\u672c\n".encode() * 10,
    "latin1.txt": "caf\u00e9 \u00fcber na\u00efve\n".encode("latin-1") * 10,
    "utf16.txt": "caf\u00e9 \u2014 \u00fcber\r\n".encode("utf-16") * 10,  # a BOM, then zero bytes
    "utf16be.json": "\ufeff{\"volume\": 3}\n".encode("utf-16-be"),
    "measurements.json": b"[12.5, 13.1, 12.9]\n",  # a data export: a store is one JSON object
    # Binary files whose byte 100 is what page 1 of a database holds there, zeros after it (a
    # gettext catalogue, a time zone file): no page size divides their sizes.
    "apt.mo": b"\xde\x12\x04\x95" + bytes(96) + b"\x0d" + bytes(22290),
    "CET": b"TZif2" + bytes(95) + b"\x05\x00\x00\x00\x02" + bytes(1989),
    # ... nor cell pointers that fit, though its size is whole pages.
    "pages.bin": (bytes(100) + b"\x0d\x00\x00\x00\x03\x0f\x00" + b"\xff\xff" * 3).ljust(8192, b"\x00"),
}


@pytest.mark.parametrize("entry_point", CLI_BACKENDS)
@pytest.mark.parametrize("name", list(SOMEONES_TEXT))
def test_someones_file_named_as_db_path_is_refused_and_nothing_is_made_beside_it(entry_point, name, tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir()
    path = folder / name
    path.write_bytes(SOMEONES_TEXT[name])
    before = _tree(folder)
    with pytest.raises(ConfigError) as caught:
        make_memory(entry_point, tmp_path / "store", {"db_path": str(path)}).close()
    assert str(path) in str(caught.value) and "not a memory store" in str(caught.value)
    assert _tree(folder) == before  # not renamed, not rewritten, no lock or journal beside it
    record("misuse", ("someone's text file as db_path", entry_point), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


def _cli_config(entry_point: str, folder: Path, postgres: bool = False) -> dict[str, Any]:
    """A config the command line can open as it is (no injected objects): each backend's real
    stores and models, the composite with the hybrid preset's members."""
    if entry_point == "ovos-memory-plugin-composite":
        members = [{"module": ep, "config": _cli_config(ep, folder / ep.rsplit("-", 1)[-1], postgres)}
                   for ep in ("ovos-memory-plugin-recency", "ovos-memory-plugin-lexical",
                              "ovos-memory-plugin-local-rag", "ovos-memory-plugin-entity")]
        return {"members": members}
    if postgres:
        from tests._postgres import folder_url

        return {**spec_for(entry_point).keep_all, "db_url": folder_url(folder)}
    if entry_point == "ovos-memory-plugin-redis":
        import uuid

        from tests._redis import server_url

        return {**spec_for(entry_point).keep_all, "url": server_url(), "prefix": f"ro:{uuid.uuid4().hex}"}
    folder.mkdir(parents=True, exist_ok=True)
    return {**spec_for(entry_point).keep_all, "db_path": str(folder / "store.db")}


RETRIEVERS = ("ovos-memory-plugin-lexical", "ovos-memory-plugin-local-rag", "ovos-memory-plugin-composite")


@pytest.mark.parametrize(("entry_point", "postgres"), [
    *[pytest.param(ep, False, id=ep) for ep in (*CLI_BACKENDS, "ovos-memory-plugin-composite")],
    pytest.param("ovos-memory-plugin-redis", False, marks=pytest.mark.redis, id="ovos-memory-plugin-redis"),
    *[pytest.param(ep, True, marks=pytest.mark.postgres, id=f"{ep}-postgres")
      for ep in ("ovos-memory-plugin-local-rag", "ovos-memory-plugin-composite")],
])
def test_read_only_commands_on_a_real_store_answer_and_change_no_file(entry_point, postgres, tmp_path, capsys):
    from ovos_memory_plugins._cli.persona import open_memory
    from ovos_memory_plugins.cli import main

    folder = tmp_path / "store"
    folder.mkdir()
    config = _cli_config(entry_point, folder, postgres)
    with open_memory(entry_point, config) as memory:  # as the command line opens it: the same models
        for n in range(3):
            memory.update_history(exchange("ro", n), "s")
        assert memory.flush(patience(120)) is not False
    before = _tree(folder)
    commands = [*CLI_READ_ONLY, *([["search", f"I like {marker('ro', 1)}"]] if entry_point in RETRIEVERS else [])]
    for command in commands:
        code = main([*command, "--module", entry_point, "--config", json.dumps(config)])
        out, err = capsys.readouterr()
        assert code == 0, f"{command} failed: {err}"
        assert "read-only" not in err and "recall is off" not in err, f"{command}: {err}"
        expected = {"sessions": "s", "stats": "1 session(s)"}.get(command[0], marker("ro", 1))
        assert expected in " ".join(out.split()), f"{command} does not show {expected!r}: {out}"
    assert _tree(folder) == before, "a read-only command changed the store"
    record("misuse", ("read-only commands on a real store", entry_point), tried=len(commands), **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


# -- config that is accepted and then fails ---------------------------------------------------------
def _numeric_keys() -> list[tuple[str, str]]:
    """(entry point, dotted key) of every number any backend takes."""
    from ovos_memory_plugins._cli.persona import memory_class
    from ovos_memory_plugins.config import config_keys

    out = []
    for ep in entry_points_with_config():
        for key, field in config_keys(memory_class(ep).Config):
            kinds = field.metadata["kind"] if isinstance(field.metadata["kind"], tuple) else (field.metadata["kind"],)
            if int in kinds or float in kinds:
                out.append((ep, key))
    return out


def entry_points_with_config() -> list[str]:
    from tests.reliability._harness import entry_points

    return entry_points()


def _nested(key: str, value: Any) -> dict:
    out: dict = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


NUMERIC = _numeric_keys()


@pytest.mark.parametrize("value", [10**30, float("inf"), float("nan")], ids=["10**30", "inf", "nan"])
@pytest.mark.parametrize(("entry_point", "key"), NUMERIC, ids=[f"{ep.split('-')[-1]}:{k}" for ep, k in NUMERIC])
def test_every_number_of_every_backend_is_bounded_at_construction(entry_point, key, value, tmp_path):
    from ovos_memory_plugins._cli.check import config_problems

    with pytest.raises(ConfigError) as caught:
        make_memory(entry_point, tmp_path / "store", _nested(key, value)).close()
    assert f"'{key}'" in str(caught.value), str(caught.value)
    assert any(f"'{key}'" in p for p in config_problems(entry_point, _nested(key, value))), \
        "check-config accepts what the backend refuses"
    record("misuse", ("each number key at 10**30, inf and nan", entry_point), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


BAD_CONFIGS = [
    ("ovos-memory-plugin-lexical", {"retrieval": {"extra_stopwords": [1, 2]}}, "retrieval.extra_stopwords"),
    ("ovos-memory-plugin-lexical", {"retrieval": {"stopword_languages": ["en", 3]}}, "retrieval.stopword_languages"),
    ("ovos-memory-plugin-lexical", {"user_template": "{utterance:>999999999}"}, "user_template"),
    ("ovos-memory-plugin-local-rag", {"system_prompt_template": "{context!r}"}, "system_prompt_template"),
    ("ovos-memory-plugin-local-rag", {"user_template": "{context.__class__}"}, "user_template"),
    ("ovos-memory-plugin-composite", {"user_template": "{header:{context}}"}, "user_template"),
    ("ovos-memory-plugin-redis", {"url": "http://localhost:6379"}, "url"),
    ("ovos-memory-plugin-recency", {"max_history": 10**30}, "max_history"),
    *[("ovos-memory-plugin-composite", {"members": [{"module": "ovos-memory-plugin-lexical", "weight": weight}]},
       "members[0].weight") for weight in (float("nan"), float("inf"), -5, "1", 1e308)],
    ("ovos-memory-plugin-composite", {"members": [{"module": "ovos-memory-plugin-lexical", "config": [1]}]},
     "members[0].config"),
]


@pytest.mark.parametrize(("entry_point", "config", "key"), BAD_CONFIGS, ids=[f"{c[0].split('-')[-1]}:{c[2]}"
                                                                              for c in BAD_CONFIGS])
def test_a_config_the_backend_would_fail_on_is_refused_at_construction_and_by_check_config(entry_point, config, key,
                                                                                           tmp_path):
    from ovos_memory_plugins._cli.check import config_problems

    with pytest.raises(ConfigError) as caught:
        make_memory(entry_point, tmp_path / "store", config).close()
    assert f"'{key}'" in str(caught.value), str(caught.value)
    problems = config_problems(entry_point, config)
    assert any(f"'{key}'" in p for p in problems), f"check-config calls it valid: {problems}"
    record("misuse", (f"a bad value ({key})", entry_point), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


@pytest.mark.parametrize(("entry_point", "read"), [("ovos-memory-plugin-entity", "memory"),
                                                   ("ovos-memory-plugin-longterm", "json")])
def test_a_backend_the_reference_read_some_way_loads_as_it_read_it_and_check_config_reports_it(entry_point, read,
                                                                                              tmp_path):
    # A ConfigError here would make ovos-persona drop the whole persona.
    from ovos_memory_plugins._cli.check import config_problems

    config = {"backend": "sqllite"}
    memory = make_memory(entry_point, tmp_path / "store", config)
    try:
        assert memory.settings.backend == read
    finally:
        memory.close()
    problems = config_problems(entry_point, config)
    assert any("'backend' is 'sqllite'" in p for p in problems), f"check-config calls it valid: {problems}"
    record("misuse", ("an unknown store backend, read as the reference read it", entry_point), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


def test_check_config_reports_every_problem_at_once_with_did_you_mean(tmp_path, capsys):
    from ovos_memory_plugins.cli import main

    persona = tmp_path / "persona.json"
    persona.write_text(json.dumps({
        "name": "Kitchen", "handlers": ["ovos-chat-openai-plugin"],
        "ovos-chat-openai-plugin": {"api_url": "http://127.0.0.1:1/v1", "allow_system_prompts": True},
        "memory_module": "ovos-memory-plugin-composite",
        "ovos-memory-plugin-composite": {"members": [
            {"module": "ovos-memory-plugin-redis", "config": {"url": "http://localhost:6379", "max_history": 10**30}},
            {"module": "ovos-memory-plugin-lexicl", "config": {}},
            {"module": "ovos-memory-plugin-entity", "config": {"backend": "sqllite", "max_facts": -1}},
            {"module": "ovos-memory-plugin-lexical", "config": {"retrieval": {"extra_stopwords": [1]},
                                                               "user_template": "{utterance:>9}"}},
        ]}}))
    code = main(["check-config", str(persona)])
    err = capsys.readouterr().err
    expected = ["'max_history'", "'url'", "did you mean 'ovos-memory-plugin-lexical'", "'backend'", "'max_facts'",
                "'retrieval.extra_stopwords'", "'user_template'"]
    missing = [e for e in expected if e not in err]
    assert code == 2 and not missing, f"check-config missed {missing}:\n{err}"
    record("misuse", ("check-config of a persona with seven errors", "ovos-memory-plugin-composite"), tried=7, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


# -- a memory used after close() ---------------------------------------------------------------
CLOSED_CASES = [*store_cases(), ("ovos-memory-plugin-composite", "ovos-memory-plugin-composite", {})]


@pytest.mark.parametrize(("name", "entry_point", "variant"), CLOSED_CASES, ids=[c[0] for c in CLOSED_CASES])
def test_an_update_after_close_is_an_error_naming_the_memory_and_stores_nothing(name, entry_point, variant,
                                                                                tmp_path):
    from ovos_memory_plugins.errors import MemoryClosed

    folder = tmp_path / "store"
    config = namespaced(entry_point, {**spec_for(entry_point).keep_all, **variant}, "closed")
    memory = make_memory(entry_point, folder, config)
    memory.update_history(exchange("open", 1), "s")
    memory.flush(patience(30))
    memory.close()
    with pytest.raises(MemoryClosed) as caught:
        memory.update_history(exchange("closed", 1), "s")
    assert memory.plugin_name in str(caught.value) and "close()" in str(caught.value), str(caught.value)
    with make_memory(entry_point, folder, config) as again:
        again.flush(patience(30))
        found = {m for counts in views(again.export("s")).values() for m in counts}
    assert marker("open", 1) in found, f"what was stored before close() is gone: {found}"
    assert marker("closed", 1) not in found, "an update refused after close() was stored anyway"
    record("misuse", ("update_history after close()", name), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})


@pytest.mark.parametrize(("name", "entry_point", "variant"), CLOSED_CASES, ids=[c[0] for c in CLOSED_CASES])
def test_reads_after_close_answer_from_the_store_and_change_no_file(name, entry_point, variant, tmp_path):
    # The reference's memories answered reads from RAM after close(); a caller reading what it
    # stored (a test, a tool closing the persona first) must not get an empty history instead.
    folder = tmp_path / "store"
    config = namespaced(entry_point, {**spec_for(entry_point).keep_all, **variant}, "closed")
    memory = make_memory(entry_point, folder, config)
    memory.update_history(exchange("open", 1), "s")
    memory.flush(patience(30))
    question = f"what do I like, {marker('open', 1)}?"
    before = (memory.get_history("s"), memory.build_conversation_context(question, "s"))
    memory.close()
    files = _tree(folder)
    after = (memory.get_history("s"), memory.build_conversation_context(question, "s"))
    assert after == before, f"{name} answers otherwise after close(): {after} instead of {before}"
    assert _tree(folder) == files, "a read after close() changed the store's files"
    record("misuse", ("reads after close()", name), tried=1, **{
        "clear error or harmless": True, "files changed": 0, "stored data lost": 0})
