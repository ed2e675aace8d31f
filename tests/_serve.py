"""The real ``ovos-memory serve`` in a child process, a household's memory for it, and headless
Chromium (Debian's chromium and chromium-driver, driven by selenium; nothing is downloaded).

Used by tests/test_serve*.py and by scripts/serve-screenshots (the docs' pictures).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ovos_memory_plugins._cli.persona import open_memory
from ovos_memory_plugins._core.compat import AgentMessage, MessageRole

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: One word no other text holds: its bytes can be looked for in the store's files.
SECRET = "zanzibarquartz"
HOUSEHOLD = (
    ("ana-kitchen", "my dog is called Biscuit", "Biscuit is a lovely name!"),
    ("ana-kitchen", "I live in Porto", "Porto is a beautiful city."),
    ("ana-kitchen", f"my locker is {SECRET}", "Noted, I will keep it."),
    ("ana-kitchen", "I am allergic to peanuts", "I will remember that you are allergic to peanuts."),
    ("rui-car", "play some jazz", "Playing jazz."),
    ("rui-car", "my name is Rui and I work at the hospital", "Nice to meet you, Rui."),
)


def household_config(folder: Path) -> dict[str, Any]:
    """The recommended hybrid in ``folder``: a window, keyword and semantic recall, and facts (no LLM)."""
    return {"api_url": None, "fusion": "score", "members": [
        {"module": "ovos-memory-plugin-recency", "config": {"db_path": str(folder / "recency.db")}},
        {"module": "ovos-memory-plugin-lexical", "config": {"db_path": str(folder / "lexical.db")}},
        {"module": "ovos-memory-plugin-local-rag", "config": {"db_path": str(folder / "rag.db")}},
        {"module": "ovos-memory-plugin-entity", "config": {"db_path": str(folder / "facts.json")}},
    ]}


def remember_household(folder: Path) -> list[str]:
    """Store :data:`HOUSEHOLD` in the hybrid of ``folder``; the ``--module/--config`` arguments for it."""
    config = household_config(folder)
    with open_memory("ovos-memory-plugin-composite", config) as memory:
        for sid, question, answer in HOUSEHOLD:
            memory.update_history([AgentMessage(MessageRole.USER, question),
                                   AgentMessage(MessageRole.ASSISTANT, answer)], sid)
        assert memory.flush(120)
    return ["--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]


def files_holding(folder: Path, word: str) -> list[str]:
    """The files under ``folder`` (journals and WAL included) whose bytes contain ``word``."""
    return [p.name for p in folder.rglob("*") if p.is_file() and word.encode() in p.read_bytes()]


@dataclasses.dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


@dataclasses.dataclass
class Served:
    """A running ``ovos-memory serve``: its base URL, and its log (stderr and stdout) so far."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, token: str | None = None, body: Any = None,
                headers: dict[str, str] | None = None, csrf: bool = True) -> Reply:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        if csrf and method not in ("GET", "HEAD"):
            sent.setdefault("X-Requested-With", "ovos-memory")
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                status, got, raw = answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as exc:
            status, got, raw = exc.code, dict(exc.headers), exc.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        return Reply(status, {k.lower(): v for k, v in got.items()}, parsed)


@contextlib.contextmanager
def served(args: list[str], log_dir: Path, env: dict[str, str] | None = None,
           patience_s: float = 120) -> Iterator[Served]:
    """``ovos-memory serve ARGS --port 0`` until the block ends (then SIGTERM, as a service manager stops it)."""
    log_path = log_dir / f"serve-{time.monotonic_ns()}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "ovos_memory_plugins", "serve", "--port", "0", *args],
                                   stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        url = _wait_for_url(process, log_path, patience_s)
        yield Served(url, process, log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(patience_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for_url(process: subprocess.Popen[bytes], log_path: Path, patience_s: float) -> str:
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        found = re.search(r"on (http://\S+?)/ \(", log_path.read_text(errors="replace"))
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise RuntimeError(f"ovos-memory serve exited ({process.returncode}): {log_path.read_text()}")
        time.sleep(0.05)
    raise RuntimeError(f"ovos-memory serve did not start: {log_path.read_text()}")


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium (selenium WebDriver) with a fresh profile, closed after the block; a
    ``width`` under 600 pixels is a phone's screen (touch layout, two pixels per point)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="ovos-memory-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium never looks for a driver online
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    if width < 600:  # a window cannot be that narrow: the page is shown as a phone shows it
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": width, "height": height, "deviceScaleFactor": 2, "mobile": True})
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
