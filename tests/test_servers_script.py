"""scripts/postgres_server.py deletes only the folders its ``start`` made.

Its ``stop FOLDER`` shuts a server down and deletes FOLDER: given an empty argument (an unset
shell variable) it once deleted the working directory, a whole checkout. No server is needed here:
what is refused is refused before any server binary is looked for.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "postgres_server.py"


def _stop(folder: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "stop", folder], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("given", ["", ".", "{here}", "{tmp_pgt}"])
def test_stop_refuses_a_folder_start_did_not_make_and_deletes_nothing(given, tmp_path):
    here = tmp_path / "checkout"
    here.mkdir()
    (here / "precious.py").write_text("keep me")
    # Named as start names its folders, but not made by it (no marker): refused all the same.
    lookalike = Path(f"/tmp/pgt-test{os.getpid()}")
    lookalike.mkdir(exist_ok=True)
    (lookalike / "data").mkdir(exist_ok=True)
    try:
        done = _stop(given.format(here=here, tmp_pgt=lookalike), here)
        assert done.returncode != 0
        assert "refusing to stop or delete" in done.stderr
        assert (here / "precious.py").read_text() == "keep me"
        assert (lookalike / "data").is_dir()
    finally:
        (lookalike / "data").rmdir()
        lookalike.rmdir()
