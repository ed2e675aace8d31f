"""``ovos-memory serve``: the JSON API against the real server (a child process on loopback), its
safety rules (token, loopback, cross-site requests, DNS rebinding, a log that holds nothing of
the memory), and the command's own checks."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from ovos_memory_plugins._cli.persona import open_memory
from ovos_memory_plugins._cli.serve import is_loopback
from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from ovos_memory_plugins._serve import views
from ovos_memory_plugins.cli import main
from tests._serve import SECRET, files_holding, household_config, remember_household, served
from tests._timing import patience

TOKEN = "correct-horse-battery"
PRIVATE = (SECRET, "Biscuit", "peanuts", "ana-kitchen", "rui-car", "Porto", TOKEN)


@pytest.fixture(scope="module")
def household(tmp_path_factory):
    folder = tmp_path_factory.mktemp("household")
    return folder, remember_household(folder)


@pytest.fixture(scope="module")
def server(household):
    folder, args = household
    with served(args, folder) as running:
        yield running


@pytest.fixture(scope="module")
def guarded(household):
    folder, args = household
    with served([*args, "--token", TOKEN], folder) as running:
        yield running


@pytest.fixture
def fresh(tmp_path):
    """A household of its own (for what changes it) and its server."""
    args = remember_household(tmp_path)
    with served(args, tmp_path) as running:
        yield tmp_path, running


# -- what a person sees ----------------------------------------------------------------------------
def test_the_api_lists_the_sessions_and_says_what_the_memory_offers(server):
    info = server.request("GET", "/api/info")
    assert info.status == 200
    assert info.body["plugin"] == "ovos-memory-plugin-composite" and info.body["token"] is False
    assert info.body["search_modes"] == ["all", "keyword", "meaning"]
    assert info.body["forget_fact"] and info.body["forget_exchange"] and not info.body["people"]
    assert server.request("GET", "/api/sessions").body == {"sessions": [{"id": "ana-kitchen"}, {"id": "rui-car"}]}


def test_a_session_shows_its_window_facts_and_stored_exchanges(server):
    view = server.request("GET", "/api/sessions/ana-kitchen").body
    assert view["id"] == "ana-kitchen"
    assert {"role": "user", "content": "my dog is called Biscuit"} in view["window"]
    facts = {f["text"]: f for f in view["facts"]}
    assert facts["User's dog is called Biscuit"]["member"] == "ovos-memory-plugin-entity"
    assert [d["content"].split("\n")[0] for d in view["documents"]] == [
        "Q: my dog is called Biscuit", "Q: I live in Porto", f"Q: my locker is {SECRET}",
        "Q: I am allergic to peanuts"]
    assert all(d["doc_id"] and d["member"] for d in view["documents"])


def test_search_finds_by_keyword_and_by_meaning_within_a_session(server):
    keyword = server.request("GET", "/api/search?q=peanuts&mode=keyword&session=ana-kitchen").body["hits"]
    assert "allergic to peanuts" in keyword[0]["content"]
    assert keyword[0]["member"] == "ovos-memory-plugin-lexical" and keyword[0]["session_id"] == "ana-kitchen"
    question = "which%20pet%20does%20she%20own"  # no word of the stored exchange: only meaning finds it
    meaning = server.request("GET", f"/api/search?q={question}&mode=meaning&session=ana-kitchen").body["hits"]
    assert "Biscuit" in meaning[0]["content"] and meaning[0]["member"] == "ovos-memory-plugin-local-rag"
    by_words = server.request("GET", f"/api/search?q={question}&mode=keyword&session=ana-kitchen").body["hits"]
    assert not any("Biscuit" in h["content"] for h in by_words)
    bad_k = server.request("GET", "/api/search?q=jazz&k=abc")
    assert bad_k.status == 400 and "'k' must be a whole number" in bad_k.body["error"]
    everywhere = server.request("GET", "/api/search?q=jazz").body["hits"]
    assert everywhere[0]["session_id"] == "rui-car"
    within = server.request("GET", "/api/search?q=jazz&session=ana-kitchen").body["hits"]
    assert all(h["session_id"] == "ana-kitchen" for h in within)


def test_export_is_a_download_of_the_whole_session(server):
    reply = server.request("GET", "/api/sessions/ana-kitchen/export")
    assert reply.status == 200
    assert reply.headers["content-disposition"] == 'attachment; filename="ana-kitchen.json"'
    assert reply.body["session_id"] == "ana-kitchen" and set(reply.body["members"]) >= {
        "ovos-memory-plugin-lexical", "ovos-memory-plugin-entity"}


def test_what_does_not_exist_is_404_and_bad_input_is_400_naming_the_problem(server):
    assert server.request("GET", "/api/sessions/nobody").status == 404
    assert server.request("GET", "/api/sessions/nobody/export").status == 404
    bad_mode = server.request("GET", "/api/search?q=dog&mode=telepathy")
    assert bad_mode.status == 400 and "'mode' must be one of" in bad_mode.body["error"]
    assert "'q'" in server.request("GET", "/api/search?q=%20").body["error"]
    assert server.request("DELETE", "/api/sessions/ana-kitchen/documents/ana-kitchen_99").status == 404
    no_fact = server.request("DELETE", "/api/sessions/ana-kitchen/facts", body={"text": "User is a pirate"})
    assert no_fact.status == 404 and no_fact.body == {"error": "no such fact in this session"}
    no_text = server.request("DELETE", "/api/sessions/ana-kitchen/facts", body={})
    assert no_text.status == 400 and "'text'" in no_text.body["error"]
    assert server.request("POST", "/api/import", body=b"{not json").status == 400


def test_head_answers_as_get_and_a_wrong_method_names_the_ones_the_resource_takes(server):
    head = server.request("HEAD", "/api/sessions/ana-kitchen")
    assert head.status == 200 and head.body is None
    assert server.request("HEAD", "/api/sessions/ana-kitchen/export").status == 200
    post = server.request("POST", "/api/sessions/ana-kitchen", body={})
    assert post.status == 405 and post.headers["allow"] == "GET, HEAD, DELETE"
    assert server.request("POST", "/api/sessions/ana-kitchen/facts", body={}).headers["allow"] == "DELETE"
    assert server.request("GET", "/api/sessions/ana-kitchen/nothing-here").status == 404


def test_a_path_spelling_its_api_part_percent_encoded_names_nothing(fresh):
    # Routed on the decoded path, "/api%2Fsessions/nobody/rui-car" read as session "nobody/rui-car"
    # while the ids were taken from the path as sent: it forgot the whole of "rui-car".
    folder, server = fresh
    assert server.request("DELETE", "/api%2Fsessions/nobody/rui-car").status == 404
    assert server.request("GET", "/api/sessions%2Fana-kitchen").status == 404
    assert server.request("DELETE", "/api%2Fpeople/nobody/ana").status == 404
    for path in ("/api%2Fsessions", "/api%2Finfo", "/api/%73essions", "/api%2Fsearch?q=dog", "/%61pi/status"):
        assert server.request("GET", path).status == 404, path  # a path is read as sent, not decoded first
    assert server.request("GET", "/api/sessions/ana%2Dkitchen").status == 200  # an id may be encoded
    assert server.request("GET", "/api/sessions").body == {"sessions": [{"id": "ana-kitchen"}, {"id": "rui-car"}]}


def test_a_session_whose_id_holds_a_line_break_can_be_opened_exported_and_forgotten(tmp_path):
    config = {"db_path": str(tmp_path / "lex.db")}
    with open_memory("ovos-memory-plugin-lexical", config) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "my code is 4417"),
                               AgentMessage(MessageRole.ASSISTANT, "noted")], "two\nlines")
    with served(["--module", "ovos-memory-plugin-lexical", "--config", json.dumps(config)], tmp_path) as running:
        assert running.request("GET", "/api/sessions").body == {"sessions": [{"id": "two\nlines"}]}
        view = running.request("GET", "/api/sessions/two%0Alines")
        assert view.status == 200 and view.body["id"] == "two\nlines"
        assert running.request("GET", "/api/sessions/two%0Alines/export").body["session_id"] == "two\nlines"
        assert running.request("DELETE", "/api/sessions/two%0Alines").status == 200
        assert running.request("GET", "/api/sessions").body == {"sessions": []}


def test_without_a_person_scope_there_are_no_people(server):
    assert server.request("GET", "/api/people").body == {"supported": False, "people": []}
    reply = server.request("GET", "/api/people/ana")
    assert reply.status == 400 and "no person scope" in reply.body["error"]


def test_people_are_listed_and_forgotten_through_the_memorys_person_scope():
    class WithPeople:  # what a memory with a person scope answers
        plugin_name = "with-people"
        forgotten: list[str] = []

        def people(self):
            return {"ana": ["ana-kitchen", "ana-car"]}

        def forget_person(self, name):
            self.forgotten.append(name)
            return {"sessions": 2}

    memory = WithPeople()
    assert views.people(memory) == [{"name": "ana", "sessions": ["ana-car", "ana-kitchen"]}]
    assert views.forget_person(memory, "ana") == {"forgotten": 2, "counts": {"sessions": 2}, "left_behind": []}
    with pytest.raises(views.NotFound):
        views.person_view(memory, "rui")


def _people_memory(folder, people):
    config = household_config(folder)
    return {**config, "scope": "person", "people": people}


def test_in_person_scope_the_page_opens_and_forgets_what_it_lists_and_never_a_whole_person_by_a_device(tmp_path):
    config = _people_memory(tmp_path, {"alice": ["alice-phone"]})
    with open_memory("ovos-memory-plugin-composite", config) as memory:
        for sid, question in (("alice-phone", "my locker is precious"), ("kitchen", "the oven is broken")):
            memory.update_history([AgentMessage(MessageRole.USER, question),
                                   AgentMessage(MessageRole.ASSISTANT, "noted")], sid)
        assert memory.flush(patience(120))
    # The kitchen becomes Alice's: its memory moves into hers, and the page never lists it apart.
    config = _people_memory(tmp_path, {"alice": ["alice-phone", "kitchen"]})
    args = ["--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]
    with served(args, tmp_path) as server:
        assert server.request("GET", "/api/sessions").body == {"sessions": [{"id": "person:alice"}]}
        assert server.request("DELETE", "/api/sessions/kitchen").status == 404
        view = server.request("GET", "/api/sessions/person%3Aalice")
        assert view.status == 200, view.body
        assert {d["content"].split("\n")[0] for d in view.body["documents"]} == {
            "Q: my locker is precious", "Q: the oven is broken"}
        hits = server.request("GET", "/api/search?q=oven&mode=keyword&session=person%3Aalice")
        assert hits.status == 200 and "oven is broken" in hits.body["hits"][0]["content"]
        doc = next(d for d in view.body["documents"] if "oven" in d["content"])
        path = f"/api/sessions/person%3Aalice/documents/{doc['doc_id']}?member={doc['member']}"
        gone = server.request("DELETE", path)
        assert gone.status == 200 and gone.body["forgotten"] > 0
        assert files_holding(tmp_path, "oven") == []
        assert "precious" in json.dumps(server.request("GET", "/api/sessions/person%3Aalice/export").body)
        # An export of a device's memory imported later lands in its person's memory, not beside it.
        exported = {"session_id": "kitchen", "plugin": "ovos-memory-plugin-composite", "members": {
            "ovos-memory-plugin-lexical": {"window": [], "documents": [
                {"content": "Q: the fridge hums\nA: noted", "ts": time.time()}]}}}
        job = server.request("POST", "/api/import", body=exported)
        deadline = time.monotonic() + patience(60)
        while job.body["phase"] not in ("done", "failed") and time.monotonic() < deadline:
            time.sleep(0.1)
            job = server.request("GET", f"/api/jobs/{job.body['id']}")
        assert job.body["phase"] == "done", job.body
        assert server.request("GET", "/api/sessions").body == {"sessions": [{"id": "person:alice"}]}
        assert server.request("DELETE", "/api/people/alice").status == 200
        assert server.request("GET", "/api/sessions").body == {"sessions": []}
    assert files_holding(tmp_path, "precious") == [] and files_holding(tmp_path, "fridge") == []


def test_a_memory_without_facts_or_search_says_so(tmp_path):
    with open_memory("ovos-memory-plugin-recency", {"db_path": str(tmp_path / "w.db")}) as memory:
        memory.update_history([], "s")
        with pytest.raises(views.Unsupported, match="no facts"):
            views.forget_fact(memory, "s", "User likes jazz")
        with pytest.raises(views.Unsupported, match="does not search"):
            views.search(memory, "jazz", None)
        assert views.memory_info(memory)["search_modes"] == []


# -- forgetting, checked in the store ---------------------------------------------------------------
def test_forgetting_an_exchange_a_fact_and_a_session_reaches_the_store(fresh):
    folder, server = fresh
    view = server.request("GET", "/api/sessions/ana-kitchen").body
    doc = next(d for d in view["documents"] if SECRET in d["content"])
    gone = server.request("DELETE", f"/api/sessions/ana-kitchen/documents/{doc['doc_id']}?member={doc['member']}")
    assert gone.status == 200 and gone.body["forgotten"] >= 4  # the window's two messages, two documents
    fact = next(f["text"] for f in view["facts"] if SECRET in f["text"])
    assert server.request("DELETE", "/api/sessions/ana-kitchen/facts", body={"text": fact}).body == {"forgotten": 1}
    assert SECRET not in json.dumps(server.request("GET", "/api/sessions/ana-kitchen/export").body)
    assert files_holding(folder, SECRET) == []  # no byte of it in any file, journals included
    gone = server.request("DELETE", "/api/sessions/rui-car").body
    assert gone["forgotten"] > 0 and gone["left_behind"] == []
    with open_memory("ovos-memory-plugin-composite", household_config(folder)) as memory:  # the store, reopened
        assert memory.sessions() == ["ana-kitchen"]
        assert len(memory.export("ana-kitchen")["members"]["ovos-memory-plugin-lexical"]["documents"]) == 3


def test_a_store_found_damaged_while_serving_is_told_in_the_servers_output(fresh):
    folder, server = fresh
    facts = folder / "facts.json"
    facts.write_bytes(facts.read_bytes()[: facts.stat().st_size // 2])
    server.request("GET", "/api/sessions/ana-kitchen")
    deadline = time.monotonic() + patience(10)
    while "corrupt" not in server.log and time.monotonic() < deadline:
        time.sleep(0.1)
    assert f"{facts} is corrupt" in server.log
    assert SECRET not in server.log  # the error names the file, nothing it held
    # A forget cannot reach the copy set aside: the answer says so, for the page to tell its user.
    gone = server.request("DELETE", "/api/sessions/ana-kitchen")
    assert gone.status == 200 and gone.body["left_behind"] == [f"{facts}.corrupt"], gone.body
    assert (folder / "facts.json.corrupt").exists()


def _asgi(app, method, path, headers=()):
    """One request straight to the ASGI app, in this process: (status, headers, JSON body)."""
    import asyncio

    sent = []
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"host", b"127.0.0.1:8000"), *headers], "scheme": "http", "http_version": "1.1",
             "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "root_path": ""}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), json.loads(body)


def test_a_store_another_process_holds_is_a_503_to_retry_not_a_failure(tmp_path, monkeypatch):
    import sqlite3

    from ovos_memory_plugins._serve.app import CSRF_HEADER, CSRF_VALUE, create_app
    from ovos_memory_plugins.storage import sqlite as _sqlite

    monkeypatch.setattr(_sqlite, "BUSY_TIMEOUT_S", 0.2)  # how long a write waits for the lock
    path = tmp_path / "w.db"
    with open_memory("ovos-memory-plugin-recency", {"db_path": str(path)}) as memory:
        memory.update_history([AgentMessage(role=MessageRole.USER, content="hello")], "s")
        other = sqlite3.connect(str(path))
        other.execute("BEGIN IMMEDIATE")  # another process's write, in progress
        try:
            status, headers, body = _asgi(create_app(memory), "DELETE", "/api/sessions/s",
                                          [(CSRF_HEADER.encode(), CSRF_VALUE.encode())])
        finally:
            other.rollback()
            other.close()
        assert status == 503 and headers[b"retry-after"] == b"5"
        assert str(path) in body["error"] and "another process holds the store" in body["error"]
        assert memory.sessions() == ["s"]  # nothing was forgotten half-way
        status, _, body = _asgi(create_app(memory), "DELETE", "/api/sessions/s",
                                [(CSRF_HEADER.encode(), CSRF_VALUE.encode())])
        assert status == 200 and memory.sessions() == []


def test_an_import_runs_in_the_background_and_reports_its_progress(fresh):
    folder, server = fresh
    exported = server.request("GET", "/api/sessions/rui-car/export").body
    assert server.request("DELETE", "/api/sessions/rui-car").status == 200
    job = server.request("POST", "/api/import", body=exported)
    assert job.status == 202 and job.body["phase"] == "importing" and job.body["total"] == 1
    deadline = time.monotonic() + patience(60)
    phases = {job.body["phase"]}
    while job.body["phase"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
        job = server.request("GET", f"/api/jobs/{job.body['id']}")
        phases.add(job.body["phase"])
    assert job.body["phase"] == "done", job.body
    assert job.body["done"] == job.body["total"] and job.body["sessions"] == 1
    assert [s["id"] for s in server.request("GET", "/api/sessions").body["sessions"]] == ["ana-kitchen", "rui-car"]
    assert server.request("GET", "/api/search?q=jazz&mode=keyword&session=rui-car").body["hits"]
    assert server.request("GET", "/api/status").body == {"backlog": 0}


def test_the_page_imports_the_export_of_the_session_named_empty(fresh):
    folder, server = fresh
    exported = server.request("GET", "/api/sessions/rui-car/export").body
    job = server.request("POST", "/api/import", body={**exported, "session_id": ""})
    assert job.status == 202, job.body
    deadline = time.monotonic() + patience(60)
    while job.body["phase"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
        job = server.request("GET", f"/api/jobs/{job.body['id']}")
    assert job.body["phase"] == "done", job.body
    assert (job.body["done"], job.body["total"]) == (1, 1)  # not 0 of 0 when nothing waited to be indexed
    assert "" in [s["id"] for s in server.request("GET", "/api/sessions").body["sessions"]]


def test_an_import_job_that_fails_names_the_session_and_stores_nothing_of_it(fresh):
    folder, server = fresh
    exported = server.request("GET", "/api/sessions/rui-car/export").body
    assert server.request("DELETE", "/api/sessions/rui-car").status == 200
    lexical = exported["members"]["ovos-memory-plugin-lexical"]
    lexical["documents"][0]["ts"] = "yesterday"
    job = server.request("POST", "/api/import", body=exported)
    deadline = time.monotonic() + patience(60)
    while job.body["phase"] not in ("done", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
        job = server.request("GET", f"/api/jobs/{job.body['id']}")
    assert job.body["phase"] == "failed" and "session 1 of 1 ('rui-car') was not imported" in job.body["error"]
    assert "'ts'" in job.body["error"]
    assert [s["id"] for s in server.request("GET", "/api/sessions").body["sessions"]] == ["ana-kitchen"]


# -- safety ------------------------------------------------------------------------------------------
def test_with_a_token_every_api_call_needs_it_and_the_page_asks_for_it(guarded):
    missing = guarded.request("GET", "/api/sessions")
    assert missing.status == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert guarded.request("GET", "/api/sessions", token="wrong-token-here").status == 403
    assert guarded.request("DELETE", "/api/sessions/rui-car").status == 401
    assert guarded.request("GET", "/api/sessions", token=TOKEN).status == 200
    assert guarded.request("GET", "/api/info", token=TOKEN).body["token"] is True
    page = guarded.request("GET", "/")
    assert page.status == 200 and 'id="token-form"' in page.body
    assert not any(word in page.body for word in PRIVATE)  # the page holds nothing of the memory


def test_the_token_scheme_is_case_insensitive(guarded):
    for scheme in ("bearer", "BEARER", "Bearer"):
        reply = guarded.request("GET", "/api/sessions", headers={"Authorization": f"{scheme} {TOKEN}"})
        assert reply.status == 200, scheme
    assert guarded.request("GET", "/api/sessions", headers={"Authorization": f"Basic {TOKEN}"}).status == 401


def test_a_body_is_read_as_it_comes_and_refused_once_over_the_limit(monkeypatch):
    import asyncio

    from starlette.requests import Request

    from ovos_memory_plugins._serve import app

    monkeypatch.setattr(app, "MAX_BODY", 1000)
    sent = []

    async def receive():  # a chunked upload: no length, 100 bytes at a time, without end
        sent.append(100)
        return {"type": "http.request", "body": b" " * 100, "more_body": True}

    request = Request({"type": "http", "method": "POST", "headers": []}, receive)
    with pytest.raises(ValueError, match="larger than") as caught:
        asyncio.run(app._json_body(request))
    assert len(sent) == 11  # stopped at the first chunk past the limit
    assert next(code for kind, code in app._STATUS if isinstance(caught.value, kind)) == 413

    monkeypatch.setattr(app, "MAX_BODY", 1_000_000)

    async def deep():
        return {"type": "http.request", "body": b"[" * 100_000, "more_body": False}

    with pytest.raises(ValueError, match="nested too deeply"):
        asyncio.run(app._json_body(Request({"type": "http", "method": "POST", "headers": []}, deep), (dict, list)))

    async def garbled():
        return {"type": "http.request", "body": b"name=Ana", "more_body": False}

    with pytest.raises(ValueError, match="the request body is not JSON"):
        asyncio.run(app._json_body(Request({"type": "http", "method": "POST", "headers": []}, garbled)))


def test_a_request_from_another_site_cannot_change_the_memory(server, guarded):
    for running, token in ((server, None), (guarded, TOKEN)):
        path = "/api/sessions/rui-car"
        assert running.request("DELETE", path, token=token, csrf=False).status == 403  # a plain form or fetch
        evil = running.request("DELETE", path, token=token, headers={"Origin": "http://evil.example"})
        assert evil.status == 403 and "another site" in evil.body["error"]
        fetched = running.request("DELETE", path, token=token, headers={"Sec-Fetch-Site": "cross-site"})
        assert fetched.status == 403
        assert running.request("GET", path, token=token).status == 200  # still there
        for site in ("cross-site", "same-site"):  # nor read it: a search's timing tells, a read may move a session
            assert running.request("GET", path, token=token, headers={"Sec-Fetch-Site": site}).status == 403
        assert running.request("GET", path, token=token, headers={"Sec-Fetch-Site": "same-origin"}).status == 200


def test_without_a_token_a_page_under_another_name_is_refused(server):
    """DNS rebinding: evil.example resolving to 127.0.0.1 would make the browser treat this server
    as that site's own; the Host header gives it away."""
    reply = server.request("GET", "/api/sessions", headers={"Host": "evil.example"})
    assert reply.status == 400 and "DNS rebinding" in reply.body["error"]
    assert server.request("GET", "/api/sessions", headers={"Host": "localhost:1234"}).status == 200


def test_every_answer_carries_the_security_headers(server):
    for path in ("/", "/api/sessions", "/static/app.js"):
        headers = server.request("GET", path).headers
        assert "default-src 'self'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
        assert headers["referrer-policy"] == "no-referrer"


def test_the_log_holds_one_line_per_request_and_nothing_of_the_memory(household):
    folder, args = household
    with served(args, folder) as running:
        running.request("GET", "/api/sessions/ana-kitchen")
        running.request("GET", f"/api/search?q={SECRET}&mode=keyword&session=ana-kitchen")
        running.request("GET", "/api/sessions/ana-kitchen/export")
        running.request("DELETE", "/api/sessions/ana-kitchen/facts", body={"text": "User is a pirate"})
        running.request("GET", "/api/sessions/rui-car/documents/x")  # an error too
    log = running.log
    for line in ("GET /api/sessions/* 200", "GET /api/search 200", "DELETE /api/sessions/*/facts 404"):
        assert line in log
    leaked = [word for word in PRIVATE if word in log]
    assert leaked == [], log


# -- the command -----------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_are_recognised(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "pi.local"])
def test_other_addresses_are_not_loopback(host):
    assert not is_loopback(host)


def test_a_non_loopback_host_without_a_token_is_refused_before_anything_opens(tmp_path, capsys):
    code = main(["serve", "--host", "0.0.0.0", "--module", "ovos-memory-plugin-recency",
                 "--config", json.dumps({"db_path": str(tmp_path / "w.db")})])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--token" in err and "0.0.0.0" in err
    assert not (tmp_path / "w.db").exists()


def test_a_short_token_is_refused(capsys):
    assert main(["serve", "--token", "abc", "--module", "ovos-memory-plugin-recency"]) == 2
    assert "at least 8 characters" in capsys.readouterr().err


def test_a_token_no_header_can_carry_is_refused(capsys):
    assert main(["serve", "--token", "passwort-€uro", "--module", "ovos-memory-plugin-recency"]) == 2
    assert "printable ASCII" in capsys.readouterr().err


def test_a_busy_port_is_one_line(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        code = main(["serve", "--port", str(port), "--module", "ovos-memory-plugin-recency",
                     "--config", json.dumps({"db_path": str(tmp_path / "w.db")})])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("ovos-memory: error: cannot listen on 127.0.0.1:")


def test_any_address_with_a_token_serves_and_sigterm_stops_it_cleanly(household):
    folder, args = household
    with served([*args, "--host", "0.0.0.0", "--token", TOKEN], folder) as running:
        url = running.url.replace("0.0.0.0", "127.0.0.1")
        running.url = url
        assert running.request("GET", "/api/sessions", token=TOKEN).status == 200
        assert running.request("GET", "/api/sessions").status == 401
    assert running.process.returncode == 0


def test_importing_the_package_and_its_command_line_loads_no_web_framework():
    code = ("import sys, ovos_memory_plugins, ovos_memory_plugins.cli\n"
            "ovos_memory_plugins.cli.build_parser()\n"
            "print(sorted(m for m in ('starlette', 'uvicorn', 'selenium', 'ovos_memory_plugins._serve.app') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patience(60))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_serve_extra_the_command_names_what_to_install(tmp_path):
    code = ("import sys\nsys.modules['starlette'] = None\n"
            "from ovos_memory_plugins.cli import main\n"
            "sys.exit(main(['serve', '--module', 'ovos-memory-plugin-recency']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=patience(60))
    assert done.returncode == 1
    assert "pip install 'ovos-memory-plugins[serve]'" in done.stderr and "Traceback" not in done.stderr


def test_any_session_id_works_in_a_path_when_percent_encoded(tmp_path):
    from urllib.parse import quote

    config = {"db_path": str(tmp_path / "lex.db")}
    odd = "Ana's room/2 ü?#"
    with open_memory("ovos-memory-plugin-lexical", config) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "hello"), AgentMessage(MessageRole.ASSISTANT, "hi")], odd)
    with served(["--module", "ovos-memory-plugin-lexical", "--config", json.dumps(config)], tmp_path) as running:
        path = f"/api/sessions/{quote(odd, safe='')}"
        assert running.request("GET", path).body["id"] == odd
        assert running.request("GET", path + "/export").headers["content-disposition"].endswith('2____.json"')
        doc = running.request("GET", path).body["documents"][0]
        assert running.request("DELETE", f"{path}/documents/{quote(doc['doc_id'], safe='')}").status == 200
        assert running.request("GET", "/api/sessions").body == {"sessions": []}  # its only exchange is gone


def test_a_search_within_the_session_named_empty_searches_that_session_only(tmp_path):
    config = {"db_path": str(tmp_path / "lex.db")}
    with open_memory("ovos-memory-plugin-lexical", config) as memory:
        for sid in ("", "other"):
            memory.update_history([AgentMessage(MessageRole.USER, f"the secret of {sid!r}"),
                                   AgentMessage(MessageRole.ASSISTANT, "noted")], sid)
    with served(["--module", "ovos-memory-plugin-lexical", "--config", json.dumps(config)], tmp_path) as running:
        within = running.request("GET", "/api/search?q=secret&mode=keyword&session=").body["hits"]
        everywhere = running.request("GET", "/api/search?q=secret&mode=keyword").body["hits"]
    assert [h["session_id"] for h in within] == [""]
    assert sorted(h["session_id"] for h in everywhere) == ["", "other"]


def test_forgetting_an_exchange_of_a_member_that_keeps_none_by_id_names_that_member(fresh):
    folder, server = fresh
    doc = server.request("GET", "/api/sessions/ana-kitchen").body["documents"][0]
    path = f"/api/sessions/ana-kitchen/documents/{doc['doc_id']}"
    window = server.request("DELETE", f"{path}?member=ovos-memory-plugin-recency")
    assert window.status == 400 and "ovos-memory-plugin-recency keeps no exchanges by id" in window.body["error"]
    unknown = server.request("DELETE", f"{path}?member=zzz")
    assert unknown.status == 400 and "'member' must name one of" in unknown.body["error"]
    assert server.request("GET", path.rsplit("/documents", 1)[0]).body["documents"][0] == doc  # nothing forgotten


def test_a_memory_that_keeps_no_exchanges_by_id_says_so_when_asked_to_forget_one(tmp_path):
    from ovos_memory_plugins.recency import RecencyMemory

    with RecencyMemory({"db_path": str(tmp_path / "r.db")}) as memory:
        memory.update_history([AgentMessage(MessageRole.USER, "hi"), AgentMessage(MessageRole.ASSISTANT, "hello")], "s")
        with pytest.raises(views.Unsupported, match="ovos-memory-plugin-recency keeps no exchanges by id"):
            views.forget_exchange(memory, "s", "s_0")


@pytest.mark.parametrize(("header", "name"), [
    ("[::1]:8765", "::1"), ("[::1]", "::1"), ("localhost", "localhost"), ("localhost:80", "localhost"),
    ("127.0.0.1:8765", "127.0.0.1"),
    # No valid shape: no name, so no allowed host matches (a browser sends none of these).
    ("[::1]evil.com", ""), ("[::1]:evil.com", ""), ("[::1", ""), ("a:b:c", ""), ("localhost:", ""), ("[::1]:", ""),
])
def test_the_host_header_is_read_strictly(header, name):
    from ovos_memory_plugins._serve.app import host_name

    assert host_name(header) == name


def test_the_page_moves_sessions_that_became_a_persons_once_and_acts_on_a_listed_key_as_itself(tmp_path):
    from ovos_memory_plugins.recency import RecencyMemory

    def say(memory, sid, text):
        memory.update_history([AgentMessage(MessageRole.USER, text), AgentMessage(MessageRole.ASSISTANT, "ok")], sid)

    config = {"db_path": str(tmp_path / "w.db"), "scope": "person"}
    old = {**config, "people": {"alice": ["alice-*"]}}
    new = {**config, "people": {"alice": ["alice-*", "kitchen", "*-kitchen"], "bob": ["bob-*"]}}
    with RecencyMemory(old) as persona:
        say(persona, "alice-phone", "my locker is 4242")
        say(persona, "kitchen", "the fridge hums")
    with RecencyMemory(new) as page, RecencyMemory(old) as persona:
        assert views.as_listed(page, views.session_ids, page) == ["person:alice"]  # moved, once
        alice = views.as_listed(page, views.session_view, page, "person:alice")["window"]
        assert "the fridge hums" in [m["content"] for m in alice]
        # Written after the page's move (a persona still on the old people): listed apart, and
        # never moved while the page runs (a move forgets what it moved, and the persona writes).
        say(persona, "kitchen", "the oven is broken")
        assert views.as_listed(page, views.session_ids, page) == ["kitchen", "person:alice"]
        person = views.as_listed(page, views.person_view, page, "alice")  # links what is listed, not patterns
        assert person["stored"] == ["kitchen", "person:alice"] and "*-kitchen" in person["sessions"]
        kitchen = views.as_listed(page, views.session_view, page, "kitchen")["window"]
        assert [m["content"] for m in kitchen] == ["the oven is broken", "ok"]
        views.as_listed(page, views.forget_session, page, "kitchen")  # its own turns, not alice's
        say(persona, "bob-kitchen", "bob was here")  # both people's patterns claim it: it stays apart
        assert views.as_listed(page, views.session_ids, page) == ["bob-kitchen", "person:alice"]
        assert views.as_listed(page, views.person_view, page, "alice")["stored"] == ["person:alice"]
        view = views.as_listed(page, views.session_view, page, "bob-kitchen")["window"]
        assert [m["content"] for m in view] == ["bob was here", "ok"]
        views.as_listed(page, views.forget_session, page, "bob-kitchen")  # its own memory, never alice's
        assert views.as_listed(page, views.session_ids, page) == ["person:alice"]
        assert "my locker is 4242" in [m.content for m in page.get_history("alice-phone")]


def test_a_fact_another_session_stated_cannot_be_forgotten_through_this_one_in_global_scope(tmp_path):
    from ovos_memory_plugins.entity import EntityMemory

    with EntityMemory({"db_path": str(tmp_path / "facts.json"), "api_url": None, "scope": "global"}) as memory:
        for sid, said in (("kitchen", "my dog is called Rex"), ("car", "I live in Paris")):
            memory.update_history([AgentMessage(MessageRole.USER, said), AgentMessage(MessageRole.ASSISTANT, "ok")],
                                  sid)
        memory.flush(patience(30))
        paris = next(f["text"] for f in views.session_view(memory, "car")["facts"] if "Paris" in f["text"])
        with pytest.raises(views.NotFound, match="no such fact in this session"):
            views.forget_fact(memory, "kitchen", paris)
        assert views.forget_fact(memory, "car", paris) == {"forgotten": 1}
