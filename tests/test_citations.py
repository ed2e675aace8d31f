"""The repository speaks of itself: no doc or comment cites a document its users do not have.

Design papers, seed documents and issue trackers stay outside the repository; where a doc or a
comment needs the reference behaviour it points at docs/compatibility.md, and otherwise it says
what it means. This test reads every doc, script and Python comment or string literal.
"""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("ovos_memory_plugins", "docs", "benchmarks", "tests", "scripts", "README.md", "CHANGELOG.md", "Makefile")
SKIPPED_DIRS = {"__pycache__", ".venv", ".venv-pre", "build", ".bench-cache"}

#: Anywhere, identifiers included (a test named after a seed document cites it too).
CITATIONS = (
    re.compile(r"(?<![a-z])seed[ _-]?0\d\d(?!\d)", re.IGNORECASE),
    re.compile(r"(?<![a-z])issues?[ _-]?#?\d+", re.IGNORECASE),
)
#: In prose only: code may name a pip requirement or a tokenizer "spec" in upper case.
SPEC = re.compile(r"\bSPEC\b")


def _files() -> list[Path]:
    out = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in candidates:
            if SKIPPED_DIRS.intersection(file.relative_to(ROOT).parts) or file == Path(__file__).resolve():
                continue
            try:
                text = file.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # images and other binary files
            out.append(file) if text else None
    return out


def _prose(file: Path, text: str) -> list[tuple[int, str]]:
    """``(line, text)`` of what a reader reads: the whole file, or a Python file's comments and strings."""
    if file.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    kinds = {tokenize.COMMENT, tokenize.STRING} | ({tokenize.FSTRING_MIDDLE} if hasattr(tokenize, "FSTRING_MIDDLE")
                                                   else set())
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type in kinds]


def _name(file: Path) -> str:
    return str(file.relative_to(ROOT)) if file.is_absolute() else str(file)


def find_citations(file: Path, text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"{_name(file)}:{number}: {m.group(0)!r}" for pattern in CITATIONS for m in pattern.finditer(line)]
    for number, chunk in _prose(file, text):
        found += [f"{_name(file)}:{number}: {m.group(0)!r}" for m in SPEC.finditer(chunk)]
    return found


def test_the_scan_sees_the_repository():
    names = {str(f.relative_to(ROOT)) for f in _files()}
    assert {"README.md", "docs/index.md", "docs/compatibility.md", "ovos_memory_plugins/retrieval.py",
            "benchmarks/_report.py", "tests/reliability/_report.py", "scripts/test"} <= names


def test_the_patterns_catch_citations_and_spare_code():
    cited = ('"""As SPEC B 4.3 says (seed 003, issue 7)."""\nx = 1  # see Issue #10\n'
             "def test_the_seed_000_example(): ...\n")
    assert len(find_citations(Path("m.py"), cited)) == 5
    code = 'REFERENCE_SPEC = "pkg"\nwork = Workload(seed=1)\nrng = random.Random(_seed(name))\n'
    assert find_citations(Path("m.py"), code) == []
    assert find_citations(Path("m.md"), "tokenizer SPEC string") == ["m.md:1: 'SPEC'"]


@pytest.mark.parametrize("file", _files(), ids=lambda f: str(f.relative_to(ROOT)))
def test_no_doc_or_comment_cites_an_outside_document(file):
    found = find_citations(file, file.read_text(encoding="utf-8"))
    assert not found, ("cite docs/compatibility.md or say what is meant, in this project's words: "
                       + "; ".join(found))
