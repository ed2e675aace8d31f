// The page of `ovos-memory serve`: every piece of the memory is shown as text (textContent),
// never as markup, and fetched from the JSON API with the token the person typed (kept for
// this tab only, in sessionStorage).
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "ovos-memory-token";
const MODE_NAMES = { all: "everything", keyword: "by keyword", meaning: "by meaning" };
const state = { info: null, session: null, person: null, backlogTotal: 0 };

class NeedsToken extends Error {}

async function api(path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  if (options.method && options.method !== "GET") headers["X-Requested-With"] = "ovos-memory";
  const response = await fetch(path, { ...options, headers, credentials: "omit", cache: "no-store" });
  // 401, or 403 on a read: the token is missing or wrong (a refused change says why in the banner).
  if (response.status === 401 || (response.status === 403 && !options.method)) {
    askForToken(response.status === 403 ? "That token is not the right one." : "");
    throw new NeedsToken();
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `the server answered ${response.status}`);
  return body;
}

const enc = encodeURIComponent;
// An id as one segment of an API path. A browser resolves a "." or ".." segment away before the
// request leaves, even percent-encoded: session "." would read and forget session "", and "./facts"
// session "facts". Such an id is refused here; the command line reaches it.
function seg(id) {
  const text = String(id);
  if (text === "." || text === "..") {
    throw new Error(`a page cannot reach the id ${JSON.stringify(text)} (browsers rewrite it); ` +
                    "use the ovos-memory command for it");
  }
  return encodeURIComponent(text);
}
const short = (name) => String(name || "").replace(/^ovos-memory-plugin-/, "");
// An id as text, with what prints as nothing or turns text around written as its escape:
// "person\u200b:alice" must not pass for Alice's "person:alice".
const shownId = (id) => String(id).replace(
  /[\u0000-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\u3164\ufe00-\ufe0f\ufeff\uffa0\u{e0000}-\u{e007f}]/gu,
  (c) => { const code = c.codePointAt(0); const hex = code.toString(16);
    return code > 0xffff ? `\\U${hex.padStart(8, "0")}` : `\\u${hex.padStart(4, "0")}`; });

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function say(message, ok = false) {
  const banner = $("banner");
  banner.textContent = message;
  banner.className = ok ? "ok" : "";
  banner.hidden = !message;
}

function failed(error) {
  if (!(error instanceof NeedsToken)) say(`Something went wrong: ${error.message}`);
}

function when(ts) {
  return ts ? new Date(ts * 1000).toLocaleString() : "";
}

// -- the token ----------------------------------------------------------------------------------
function askForToken(why) {
  $("main").hidden = true;
  $("token-form").hidden = false;
  say(why);
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token-input").value);
  $("token-input").value = "";
  start();
});

// -- sessions and people ----------------------------------------------------------------------------
async function loadSessions() {
  const { sessions } = await api("/api/sessions");
  const list = $("sessions");
  list.replaceChildren(...sessions.map(({ id }) => el("li", {}, el("a", {
    href: `#session=${enc(id)}`, text: shownId(id) || "(unnamed)", "data-session": id,
    "aria-current": String(id === state.session),
  }))));
  $("no-sessions").hidden = sessions.length > 0;
}

async function loadPeople() {
  const { supported, people } = await api("/api/people");
  $("people-section").hidden = !supported;
  $("people").replaceChildren(...people.map(({ name }) => el("li", {}, el("a", {
    href: `#person=${enc(name)}`, text: name, "aria-current": String(name === state.person),
  }))));
}

function showOnly(section) {
  for (const id of ["session", "person", "empty-hint"]) $(id).hidden = id !== section;
}

// The path first: an id the page cannot reach leaves nothing of another session on show.
function pathOf(kind, id) {
  try { return `/api/${kind}/${seg(id)}`; } catch (error) { showOnly("empty-hint"); throw error; }
}

async function openSession(id) {
  const path = pathOf("sessions", id);
  state.session = id;
  state.person = null;
  const view = await api(path);
  $("session-title").textContent = `Session ${shownId(id)}`;
  $("summaries").replaceChildren(...view.summaries.map((s) => el("div", { class: "summary", text: s.text })));
  if (!view.summaries.length) $("summaries").replaceChildren(el("p", { class: "muted", text: "No summary." }));
  const facts = view.facts.map((fact) => item(fact.text, fact.kind === "superseded" ? "no longer true" : short(fact.member),
    state.info.forget_fact && (() => forgetFact(id, fact.text))));
  $("facts").replaceChildren(...(facts.length ? facts : [el("li", { class: "muted", text: "No facts." })]));
  $("window").replaceChildren(...view.window.map((m) => el("li", { class: m.role },
    el("span", { class: "role", text: m.role }), m.content)));
  if (!view.window.length) $("window").replaceChildren(el("li", { class: "muted", text: "Empty." }));
  const docs = view.documents.map((d) => item(d.content, `${when(d.ts)} · ${short(d.member)}`,
    state.info.forget_exchange && (() => forgetExchange(id, d.doc_id, d.member))));
  $("documents").replaceChildren(...(docs.length ? docs : [el("li", { class: "muted", text: "None." })]));
  showOnly("session");
  await loadSessions();
}

async function openPerson(name) {
  const path = pathOf("people", name);
  state.person = name;
  state.session = null;
  const person = await api(path);
  $("person-title").textContent = shownId(name);
  // The person's memory is listed under its key; their session ids and patterns only say which
  // devices are theirs, and open nothing of their own.
  const stored = person.stored.map((id) => el("li", {}, el("a", { href: `#session=${enc(id)}`, text: shownId(id) })));
  $("person-memory").replaceChildren(...(stored.length ? stored : [el("li", { class: "muted", text: "Nothing yet." })]));
  $("person-sessions").replaceChildren(...person.sessions.map((id) => el("li", { text: shownId(id) })));
  showOnly("person");
}

function item(text, meta, forget) {
  const body = el("span", { class: "text" }, text, el("span", { class: "meta", text: meta || "" }));
  const button = forget ? el("button", { type: "button", class: "quiet", text: "Forget", onclick: forget }) : null;
  return el("li", {}, body, button);
}

// -- forgetting ------------------------------------------------------------------------------------
// ``where`` gives the request's path: an id the page cannot reach (seg) is said, not thrown away.
async function forget(question, where, options, after) {
  let path;
  try { path = where(); } catch (error) { failed(error); return; }
  if (!window.confirm(question)) return;
  try {
    const result = await api(path, { method: "DELETE", ...options });
    await after();
    const done = `Forgotten (${result.forgotten} item${result.forgotten === 1 ? "" : "s"} deleted)`;
    const left = result.left_behind || [];
    // A damaged copy set aside earlier still holds what it held: only its owner can decide to delete it.
    if (left.length) say(`${done}, but ${left.length === 1 ? "a damaged copy" : "damaged copies"} of the store, set aside ` +
      `earlier, may still hold it: ${left.join(", ")}. Recover what you need from ${left.length === 1 ? "it" : "them"}, ` +
      "then delete them on the server.");
    else say(`${done}.`, true);
  } catch (error) { failed(error); }
}

function forgetExchange(id, docId, member) {
  return forget("Forget this exchange everywhere it is kept?",
    () => `/api/sessions/${seg(id)}/documents/${seg(docId)}?member=${enc(member)}`, {}, () => refresh());
}

function forgetFact(id, text) {
  return forget(`Forget the fact "${text}"?`, () => `/api/sessions/${seg(id)}/facts`, {
    body: JSON.stringify({ text }), headers: { "Content-Type": "application/json" },
  }, () => refresh());
}

// Off the view of what was just forgotten, without a hashchange (it would clear the banner that
// says what the forget did); the lists and any search results read again, so no hit of it stays.
async function leaveForgotten(...loads) {
  history.replaceState(null, "", location.pathname + location.search);
  showOnly("empty-hint");
  await Promise.all(loads.map((load) => load()));
  if (!$("search-results").hidden) $("search-form").requestSubmit();
}

$("forget-session").addEventListener("click", () => forget(
  `Forget everything of session "${shownId(state.session)}"? This cannot be undone.`,
  () => `/api/sessions/${seg(state.session)}`, {}, () => {
    state.session = null;
    return leaveForgotten(loadSessions);
  }));

$("forget-person").addEventListener("click", () => forget(
  `Forget everything about ${shownId(state.person)}? This cannot be undone.`,
  () => `/api/people/${seg(state.person)}`, {}, () => {
    state.person = null;
    return leaveForgotten(loadSessions, loadPeople);
  }));

// -- export ---------------------------------------------------------------------------------------
async function download(where, name) {
  try {
    const data = await api(where());
    const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
    const link = el("a", { href: URL.createObjectURL(blob), download: `${name.replace(/[^A-Za-z0-9._-]/g, "_") || "memory"}.json` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  } catch (error) { failed(error); }
}

$("export-session").addEventListener("click", () => download(() => `/api/sessions/${seg(state.session)}/export`, state.session));
$("export-person").addEventListener("click", () => download(() => `/api/people/${seg(state.person)}/export`, state.person));

// -- search ---------------------------------------------------------------------------------------
$("search-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const params = new URLSearchParams({ q: $("search-input").value, mode: $("search-mode").value, k: "10" });
  if ($("search-this-session").checked && state.session !== null) params.set("session", state.session);
  try {
    const { hits } = await api(`/api/search?${params}`);
    const items = hits.map((h) => item(h.content, `${shownId(h.session_id ?? "")} · ${short(h.member)} · score ${h.score.toFixed(3)}`,
      state.info.forget_exchange && h.session_id != null &&
        (() => forgetExchange(h.session_id, h.doc_id, h.member))));
    $("hits").replaceChildren(...(items.length ? items : [el("li", { class: "muted", text: "Nothing found." })]));
    $("search-results").hidden = false;
  } catch (error) { failed(error); }
});

// -- import and the index: long work with a progress bar ------------------------------------------------
function showProgress(label, done, total) {
  $("progress").hidden = false;
  $("progress-label").textContent = total ? `${label}: ${done} of ${total}` : label;
  const bar = $("progress-bar");
  if (total) { bar.max = total; bar.value = done; } else { bar.removeAttribute("value"); }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

$("import-button").addEventListener("click", async () => {
  const file = $("import-file").files[0];
  if (!file) { say("Choose a file to import first."); return; }
  try {
    let job = await api("/api/import", {
      method: "POST", body: await file.text(), headers: { "Content-Type": "application/json" },
    });
    while (job.phase === "importing" || job.phase === "indexing") {
      showProgress(job.phase === "importing" ? "Importing sessions" : "Indexing what was imported", job.done, job.total);
      await sleep(400);
      job = await api(`/api/jobs/${seg(job.id)}`);
    }
    $("progress").hidden = true;
    if (job.error) throw new Error(job.error);
    say(`Imported ${job.sessions} session${job.sessions === 1 ? "" : "s"}.`, true);
    await loadSessions();
  } catch (error) { $("progress").hidden = true; failed(error); }
});

async function watchIndex() {
  // Documents waiting for the index: after an embedder change every one is embedded again.
  try {
    const { backlog } = await api("/api/status");
    if (backlog) {
      state.backlogTotal = Math.max(state.backlogTotal, backlog);
      showProgress("Indexing (embedding stored exchanges)", state.backlogTotal - backlog, state.backlogTotal);
      setTimeout(watchIndex, 1000);
    } else if (state.backlogTotal) {
      state.backlogTotal = 0;
      $("progress").hidden = true;
    }
  } catch (error) { failed(error); }
}

// -- start -----------------------------------------------------------------------------------------
async function refresh() {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.has("session")) await openSession(hash.get("session"));
  else if (hash.has("person")) await openPerson(hash.get("person"));
  else { showOnly("empty-hint"); await loadSessions(); }
  if (!$("search-results").hidden) $("search-form").requestSubmit();
}

// A new view: what the banner said was about the last one (an error there must not stay up).
window.addEventListener("hashchange", () => { say(""); refresh().catch(failed); });

async function start() {
  try {
    state.info = await api("/api/info");
    $("token-form").hidden = true;
    say("");
    $("memory-name").textContent = short(state.info.plugin) +
      (state.info.members.length > 1 ? `: ${state.info.members.map(short).join(", ")}` : "");
    $("search-mode").replaceChildren(...state.info.search_modes.map((mode) =>
      el("option", { value: mode, text: MODE_NAMES[mode] || mode })));
    $("search-form").hidden = state.info.search_modes.length === 0;
    $("import-section").hidden = !state.info.import;
    $("main").hidden = false;
    await Promise.all([refresh(), loadPeople()]);
    watchIndex();
  } catch (error) { failed(error); }
}

start();
