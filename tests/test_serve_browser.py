"""``ovos-memory serve`` as a person uses it: headless Chromium opens the page, gives the token,
finds a remembered sentence, forgets it through the page, and the store, reopened, no longer
holds it. scripts/test installs Debian's chromium and chromium-driver, so this never skips."""
from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from ovos_memory_plugins._cli.persona import open_memory
from ovos_memory_plugins._core.compat import AgentMessage, MessageRole
from tests._serve import SECRET, chromium, files_holding, household_config, remember_household, served
from tests._timing import patience

pytestmark = pytest.mark.browser
TOKEN = "a-family-secret-token"


def wait(driver, condition, seconds=30):
    return WebDriverWait(driver, patience(seconds)).until(condition)


def visible(driver, element_id):
    return wait(driver, seen.visibility_of_element_located((By.ID, element_id)))


def item_holding(driver, list_id, text):
    """The entry of list ``list_id`` whose text holds ``text`` (waits for it)."""
    def find(d):
        return next((li for li in d.find_elements(By.CSS_SELECTOR, f"#{list_id} li") if text in li.text), False)

    return wait(driver, find)


def forget(driver, entry):
    entry.find_element(By.TAG_NAME, "button").click()
    alert = wait(driver, seen.alert_is_present())
    alert.accept()
    wait(driver, lambda d: d.find_element(By.ID, "banner").text.startswith("Forgotten"))


def test_a_person_finds_a_remembered_sentence_forgets_it_and_it_is_gone_from_the_store(tmp_path):
    args = remember_household(tmp_path)
    with served([*args, "--token", TOKEN], tmp_path) as server, chromium() as driver:
        driver.get(server.url + "/")
        visible(driver, "token-input").send_keys(TOKEN + "\n")  # the page asks for the token first
        wait(driver, seen.element_to_be_clickable((By.LINK_TEXT, "ana-kitchen"))).click()
        assert "my dog is called Biscuit" in visible(driver, "window").text

        search = visible(driver, "search-input")
        search.send_keys("locker code")
        driver.find_element(By.CSS_SELECTOR, "#search-mode option[value=keyword]").click()
        driver.find_element(By.CSS_SELECTOR, "#search-form button").click()
        hit = item_holding(driver, "hits", SECRET)
        assert "ana-kitchen" in hit.text and "lexical" in hit.text
        forget(driver, hit)  # forgets the exchange everywhere: window, keyword and semantic recall

        wait(driver, lambda d: SECRET not in d.find_element(By.ID, "documents").text)
        assert SECRET not in driver.find_element(By.ID, "window").text
        forget(driver, item_holding(driver, "facts", SECRET))  # and the fact drawn from it
        wait(driver, lambda d: SECRET not in d.find_element(By.ID, "facts").text)
        assert "Biscuit" in driver.find_element(By.ID, "documents").text  # the rest is still there
    config = household_config(tmp_path)
    with open_memory("ovos-memory-plugin-composite", config) as memory:  # the store, reopened
        assert SECRET not in json.dumps(memory.export("ana-kitchen"))
        assert memory.search(f"locker code {SECRET}", "ana-kitchen", top_k=10)
        assert all(SECRET not in h.content for h in memory.search(f"locker code {SECRET}", "ana-kitchen", top_k=10))
    assert files_holding(tmp_path, SECRET) == []


def test_the_page_fits_a_phone_and_forgets_a_whole_session(tmp_path):
    args = remember_household(tmp_path)
    with served(args, tmp_path) as server, chromium(390, 844) as driver:
        driver.get(server.url + "/#session=rui-car")
        assert "play some jazz" in visible(driver, "window").text
        assert driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        driver.find_element(By.ID, "forget-session").click()
        wait(driver, seen.alert_is_present()).accept()
        wait(driver, lambda d: "rui-car" not in d.find_element(By.ID, "sessions").text)
        assert server.request("GET", "/api/sessions").body == {"sessions": [{"id": "ana-kitchen"}]}


def test_forgetting_a_session_says_which_damaged_copy_may_still_hold_it(tmp_path):
    args = remember_household(tmp_path)
    facts = tmp_path / "facts.json"
    facts.write_bytes(facts.read_bytes()[: facts.stat().st_size // 2])  # set aside when the server reads it
    with served(args, tmp_path) as server, chromium() as driver:
        driver.get(server.url + "/#session=rui-car")
        assert "play some jazz" in visible(driver, "window").text
        driver.find_element(By.ID, "forget-session").click()
        wait(driver, seen.alert_is_present()).accept()
        wait(driver, lambda d: "damaged copy" in d.find_element(By.ID, "banner").text)
        assert f"{facts}.corrupt" in driver.find_element(By.ID, "banner").text
        assert "rui-car" not in driver.find_element(By.ID, "sessions").text


def remembered(config, said):
    """Each ``session: text`` of ``said`` stored (answered "noted") in the composite of ``config``;
    the ``--module/--config`` arguments for it."""
    with open_memory("ovos-memory-plugin-composite", config) as memory:
        for sid, text in said.items():
            memory.update_history([AgentMessage(MessageRole.USER, text), AgentMessage(MessageRole.ASSISTANT, "noted")],
                                  sid)
        assert memory.flush(patience(120))
    return ["--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]


def test_a_session_id_holding_what_prints_as_nothing_is_shown_with_its_escape(tmp_path):
    args = remembered(household_config(tmp_path), {"ana\u200b-kitchen": "a look-alike's words"})
    with served(args, tmp_path) as server, chromium() as driver:
        driver.get(server.url + "/")
        link = wait(driver, seen.element_to_be_clickable((By.LINK_TEXT, "ana\\u200b-kitchen")))
        link.click()  # and it still opens that session
        wait(driver, lambda d: "a look-alike's words" in d.find_element(By.ID, "window").text)
        assert driver.find_element(By.ID, "session-title").text == "Session ana\\u200b-kitchen"


def test_a_session_file_is_imported_through_the_page(tmp_path):
    args = remember_household(tmp_path)
    with served(args, tmp_path) as server, chromium() as driver:
        exported = server.request("GET", "/api/sessions/rui-car/export").body
        assert server.request("DELETE", "/api/sessions/rui-car").status == 200
        upload = tmp_path / "rui-car.json"
        upload.write_text(json.dumps(exported))
        driver.get(server.url + "/")
        wait(driver, lambda d: "ana-kitchen" in d.find_element(By.ID, "sessions").text)
        driver.find_element(By.ID, "import-file").send_keys(str(upload))
        driver.find_element(By.ID, "import-button").click()
        wait(driver, lambda d: d.find_element(By.ID, "banner").text == "Imported 1 session.", 60)
        wait(driver, lambda d: "rui-car" in d.find_element(By.ID, "sessions").text)
        assert server.request("GET", "/api/search?q=jazz&mode=keyword&session=rui-car").body["hits"]


def test_a_persons_page_opens_their_memory_and_shows_their_patterns_as_text(tmp_path):
    config = {**household_config(tmp_path), "scope": "person", "people": {"ana": ["ana-*"]}}
    args = remembered(config, {"ana-kitchen": "my dog is called Biscuit"})
    with served(args, tmp_path) as server, chromium() as driver:
        driver.get(server.url + "/#person=ana")
        wait(driver, lambda d: "ana-*" in d.find_element(By.ID, "person-sessions").text)
        assert not driver.find_elements(By.CSS_SELECTOR, "#person-sessions a")  # a pattern opens nothing
        wait(driver, seen.element_to_be_clickable((By.LINK_TEXT, "person:ana"))).click()
        wait(driver, lambda d: "my dog is called Biscuit" in d.find_element(By.ID, "window").text)


def test_a_session_named_dot_or_dot_dot_is_refused_by_the_page_not_taken_for_another(tmp_path):
    # A browser resolves "." and ".." path segments before it sends a request, even percent-
    # encoded: session "." would read (and forget) session "", and "./facts" session "facts". The
    # page refuses those ids and shows nothing of another session.
    config = household_config(tmp_path)
    sessions = {"": "the secret of the unnamed", ".": "the secret of dot", "..": "the secret of dots"}
    with open_memory("ovos-memory-plugin-composite", config) as memory:
        for sid, said in sessions.items():
            memory.update_history([AgentMessage(MessageRole.USER, said), AgentMessage(MessageRole.ASSISTANT, "ok")],
                                  sid)
        assert memory.flush(patience(120))
    args = ["--module", "ovos-memory-plugin-composite", "--config", json.dumps(config)]
    with served(args, tmp_path) as server, chromium() as driver:
        driver.get(server.url + "/#session=")
        wait(driver, lambda d: sessions[""] in d.find_element(By.ID, "window").text)
        for sid in (".", ".."):
            driver.find_element(By.CSS_SELECTOR, f'#sessions a[data-session="{sid}"]').click()
            wait(driver, lambda d: "use the ovos-memory command" in d.find_element(By.ID, "banner").text)
            assert not driver.find_element(By.ID, "session").is_displayed()  # nothing of "" left on show
            assert sessions[""] not in driver.find_element(By.TAG_NAME, "body").text
        driver.find_element(By.CSS_SELECTOR, '#sessions a[data-session=""]').click()  # another view: the error goes
        wait(driver, lambda d: sessions[""] in d.find_element(By.ID, "window").text)
        assert not driver.find_element(By.ID, "banner").is_displayed()
        driver.get(server.url + "/")  # no session open: the search looks in every session
        search = visible(driver, "search-input")  # a hit of session "." found by search: forgetting it
        search.send_keys("secret of dot")
        driver.find_element(By.CSS_SELECTOR, "#search-mode option[value=keyword]").click()
        driver.find_element(By.CSS_SELECTOR, "#search-form button").click()
        item_holding(driver, "hits", sessions["."]).find_element(By.TAG_NAME, "button").click()
        wait(driver, lambda d: "use the ovos-memory command" in d.find_element(By.ID, "banner").text)
        listed = {s["id"] for s in server.request("GET", "/api/sessions").body["sessions"]}
        dot = server.request("GET", "/api/sessions/%2E").body
    assert listed == set(sessions)
    assert sessions["."] in json.dumps(dot)  # nothing of "." was forgotten
