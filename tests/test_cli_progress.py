"""Long CLI work shows its progress on a terminal: ``import`` and ``index`` (every document
embedded again after an embedder change); in a log or a pipe, no bar lines."""
from __future__ import annotations

import io
import json

from rich.console import Console

from ovos_memory_plugins._cli.commands import wait_for_index
from ovos_memory_plugins._cli.output import UI
from ovos_memory_plugins._cli.persona import open_memory
from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins.cli import main
from tests._timing import patience

U, A = MessageRole.USER, MessageRole.ASSISTANT


class Backlog:
    """A memory whose index catches up one document per flush."""

    def __init__(self, waiting: int, stuck: bool = False):
        self.waiting = waiting
        self.stuck = stuck

    def index_backlog(self) -> int:
        return self.waiting

    def flush(self, timeout=None) -> bool:
        if not self.stuck:
            self.waiting = max(0, self.waiting - 1)
        return self.waiting == 0


def ui_on(terminal: bool) -> UI:
    ui = UI()
    ui.err = Console(file=io.StringIO(), force_terminal=terminal, width=100)
    return ui


def test_waiting_for_the_index_draws_a_bar_of_the_documents_on_a_terminal():
    ui = ui_on(terminal=True)
    assert wait_for_index(Backlog(5), ui, timeout=patience(10), poll=0.01)
    drawn = ui.err.file.getvalue()
    assert "indexing" in drawn and "/5" in drawn


def test_in_a_log_or_a_pipe_no_bar_is_drawn():
    ui = ui_on(terminal=False)
    assert wait_for_index(Backlog(5), ui, timeout=patience(10), poll=0.01)
    assert ui.err.file.getvalue() == ""


def test_waiting_gives_up_after_the_timeout():
    assert not wait_for_index(Backlog(3, stuck=True), ui_on(terminal=False), timeout=0.05, poll=0.01)


def test_index_embeds_every_document_again_after_an_embedder_change(tmp_path, capsys):
    path = str(tmp_path / "rag.db")
    with open_memory("ovos-memory-plugin-local-rag", {"db_path": path}) as memory:  # the default: e5
        for i in range(3):
            memory.update_history([AgentMessage(U, f"question {i}"), AgentMessage(A, f"answer {i}")], "s")
        assert memory.flush(patience(60))
    args = ["--module", "ovos-memory-plugin-local-rag",
            "--config", json.dumps({"db_path": path, "embeddings_plugin": "ovos-memory-minilm-embeddings-plugin"})]
    assert main(["index", *args]) == 0
    assert "up to date (3 document(s) indexed now)" in capsys.readouterr().out
    assert main(["index", *args]) == 0
    assert "(0 document(s) indexed now)" in capsys.readouterr().out


def test_index_of_a_memory_without_an_index_is_one_line(tmp_path, capsys):
    code = main(["index", "--module", "ovos-memory-plugin-recency",
                 "--config", json.dumps({"db_path": str(tmp_path / "w.db")})])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "keeps no index of its own" in err
