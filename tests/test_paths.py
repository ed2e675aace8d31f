"""Store paths as a user writes them: resolved where the store resolves them, refused when they
cannot mean what was meant."""
from __future__ import annotations

import os

import pytest

from ovos_memory_plugins._core.paths import resolve_path
from ovos_memory_plugins.entity import EntityMemory
from ovos_memory_plugins.errors import ConfigError
from ovos_memory_plugins.lexical import LexicalMemory
from ovos_memory_plugins.recency import RecencyMemory
from ovos_memory_plugins.short_term import BasicShortTermMemory


@pytest.fixture(autouse=True)
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("OVOS_TEST_UNSET_VARIABLE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("path", "problem"), [
    ("$OVOS_TEST_UNSET_VARIABLE/mem.db", "environment variable \\$OVOS_TEST_UNSET_VARIABLE, which is not set"),
    ("${OVOS_TEST_UNSET_VARIABLE}/mem.db", "which is not set"),
    ("~ovos-no-such-user-here/mem.db", "there is no user '~ovos-no-such-user-here'"),
    ("mem.db\n", "control character"),
    ("me\tm.db", "control character"),
    ("~/.local/share/ovos/", "ends with '/': it names a folder; name a file in it"),
    ("mem.db/", "ends with '/'"),
    (" ~/mem.db", "starts or ends with a space"),
    ("mem.db ", "starts or ends with a space"),
])
def test_a_path_that_cannot_mean_what_was_meant_is_a_config_error(path, problem, data_home):
    with pytest.raises(ConfigError, match=problem):
        resolve_path(path)
    for make in (lambda: RecencyMemory({"db_path": path}), lambda: LexicalMemory({"db_path": path}),
                 lambda: EntityMemory({"db_path": path, "api_url": None})):
        with pytest.raises(ConfigError, match=problem):
            make()
    made = [os.path.join(root, name) for root, dirs, files in os.walk(data_home) for name in dirs + files]
    assert not [m for m in made if "OVOS_TEST" in m or "no-such-user" in m or "mem.db" in m or m.endswith(" ~")]
    assert not os.path.isfile(data_home / "home" / ".local" / "share" / "ovos")  # a file named as the folder


def test_a_set_variable_and_the_home_folder_are_expanded(data_home, monkeypatch):
    monkeypatch.setenv("OVOS_TEST_FOLDER", str(data_home / "there"))
    assert resolve_path("$OVOS_TEST_FOLDER/m.db") == str(data_home / "there" / "m.db")
    assert resolve_path("~/m.db") == str(data_home / "home" / "m.db")
    assert resolve_path("rel/m.db") == str(data_home / "xdg" / "ovos" / "rel" / "m.db")


@pytest.mark.parametrize("make", [
    lambda p: RecencyMemory({"db_path": p}), lambda p: BasicShortTermMemory({"db_path": p}),
    lambda p: EntityMemory({"db_path": p, "api_url": None}), lambda p: LexicalMemory({"db_path": p}),
])
def test_db_path_is_the_file_in_force_on_every_backend(make, data_home):
    memory = make("rel/store.db")
    try:
        assert memory.db_path == str(data_home / "xdg" / "ovos" / "rel" / "store.db")
        assert not (data_home / "rel").exists()  # never the working folder
    finally:
        memory.close()


def test_a_blank_db_path_is_an_error_on_every_backend_and_an_empty_one_is_not_given():
    for make in (RecencyMemory, LexicalMemory, lambda c: EntityMemory({**c, "api_url": None})):
        with pytest.raises(ConfigError, match="must not be empty"):
            make({"db_path": "  "})
    memory = RecencyMemory({"db_path": ""})
    assert memory.db_path is None  # the window in RAM, as without the key
    memory.close()
