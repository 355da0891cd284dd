// The viewer: the sign-in prompt, the session list (polled while the tab is visible) and the
// followed session (its header polled, its timeline streamed). Read-only: it only ever sends
// GET requests to the gateway's public API.

import { ApiError, follow, getJson, key, listEvents } from "./api.js";
import { Timeline, el } from "./timeline.js";

const LIST_EVERY_MS = 2000;
const SESSION_EVERY_MS = 3000;
const AGENTS_EVERY_MS = 30_000;
const LIST_LIMIT = 100;

const $ = (id) => document.getElementById(id);

const ui = {
  signIn: $("sign-in"),
  signInForm: $("sign-in-form"),
  signInReason: $("sign-in-reason"),
  keyInput: $("api-key"),
  signOut: $("sign-out"),
  problem: $("problem"),
  viewer: $("viewer"),
  connection: $("connection"),
  status: $("filter-status"),
  agent: $("filter-agent"),
  rows: $("session-rows"),
  listNote: $("list-note"),
  empty: $("session-empty"),
  head: $("session-head"),
  timeline: new Timeline($("timeline")),
};

/** What the page is doing; replaced as a whole on sign-out. */
let view = null;

function age(iso) {
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (!Number.isFinite(s)) return "";
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

/** The environment column: the sandbox's state, and an executor's connection for self-hosted sessions. */
function environmentText(s) {
  const state = s.environment_state || "";
  return s.environment?.status ? `${state} (executor ${s.environment.status})` : state;
}

function badge(status) {
  return el("span", `badge status-${status}`, status);
}

// --- sign-in --------------------------------------------------------------------------------

/** Shows the prompt and nothing else: no session data stays on screen without a valid key. */
function askForKey(reason) {
  stop();
  ui.viewer.hidden = true;
  ui.problem.hidden = true;
  ui.signOut.hidden = true;
  ui.rows.replaceChildren();
  ui.timeline.clear();
  ui.signIn.hidden = false;
  ui.signInReason.textContent = reason || "";
  ui.keyInput.value = "";
  ui.keyInput.focus();
}

ui.signInForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const k = ui.keyInput.value.trim();
  if (!k) return;
  key.set(k);
  ui.keyInput.value = "";
  start();
});

ui.signOut.addEventListener("click", () => {
  key.clear();
  askForKey("Signed out.");
});

/** A failure of a read: a refused key brings the prompt back, anything else is shown and retried. */
function failed(error) {
  if (error instanceof ApiError && error.unauthorized) {
    const hadKey = Boolean(key.get());
    key.clear();
    askForKey(hadKey ? `The gateway refused that key: ${error.message}` : error.message);
    return true;
  }
  if (error?.name === "AbortError") return true;
  ui.problem.textContent = error instanceof ApiError ? `${error.status}: ${error.message}` : `cannot reach the gateway (${error})`;
  ui.problem.hidden = false;
  return false;
}

// --- the list -------------------------------------------------------------------------------

function listParams() {
  const params = [["limit", String(LIST_LIMIT)]];
  if (ui.status.value) params.push(["statuses[]", ui.status.value]);
  if (ui.agent.value) params.push(["agent_id", ui.agent.value]);
  return params;
}

function renderList(sessions, more) {
  const selected = view?.session?.id;
  ui.rows.replaceChildren(
    ...sessions.map((s) => {
      const tr = el("tr", s.id === selected ? "selected" : "");
      tr.dataset.session = s.id;
      const name = el("td", "name");
      const link = el("a", "", s.title || s.id);
      link.href = `#${s.id}`;
      name.append(link);
      if (s.title) name.append(el("div", "id", s.id));
      const status = el("td");
      status.append(badge(s.status));
      const created = el("td", "age", age(s.created_at));
      created.title = s.created_at;
      tr.append(
        name,
        status,
        el("td", "", s.agent?.name || s.agent?.id || ""),
        el("td", "", s.agent?.backend || ""),
        el("td", "", environmentText(s)),
        created,
      );
      return tr;
    }),
  );
  const filtered = ui.status.value || ui.agent.value;
  ui.listNote.textContent = sessions.length
    ? more
      ? `The newest ${sessions.length} sessions.`
      : ""
    : filtered
      ? "No sessions match these filters."
      : "No sessions yet.";
}

async function refreshList() {
  const body = await getJson("/v1/sessions", listParams(), view.aborter.signal);
  renderList(body.data, Boolean(body.next_page));
}

async function refreshAgents() {
  const body = await getJson("/v1/agents", [["limit", "100"]], view.aborter.signal);
  const chosen = ui.agent.value;
  const options = [el("option", "", "any")];
  options[0].value = "";
  for (const a of body.data) {
    const o = el("option", "", a.name ? `${a.name} (${a.id})` : a.id);
    o.value = a.id;
    options.push(o);
  }
  ui.agent.replaceChildren(...options);
  ui.agent.value = body.data.some((a) => a.id === chosen) ? chosen : "";
}

for (const filter of [ui.status, ui.agent]) {
  filter.addEventListener("change", () => view && refreshList().catch(failed));
}

// --- one session ----------------------------------------------------------------------------

function renderHead(s) {
  $("session-title").textContent = s.title || "(untitled)";
  $("session-id").textContent = s.id;
  $("session-status").replaceChildren(badge(s.status));
  $("session-agent").textContent = `${s.agent?.name || ""} (${s.agent?.id || ""}, version ${s.agent?.version ?? "?"})`;
  $("session-backend").textContent = s.agent?.backend || "";
  $("session-environment").textContent = `${environmentText(s)} (${s.environment_id})`;
  ui.timeline.environment(s.environment_state, new Date().toISOString());
}

async function refreshSession() {
  const s = view.session;
  if (!s) return;
  renderHead(await getJson(`/v1/sessions/${encodeURIComponent(s.id)}`, [], view.aborter.signal));
}

function closeSession() {
  if (!view?.session) return;
  view.session.stream.stop();
  view.session = null;
  ui.timeline.clear();
  ui.head.hidden = true;
  ui.empty.hidden = false;
}

function openSession(id) {
  closeSession();
  if (!id || !view) return;
  for (const tr of ui.rows.children) tr.classList.toggle("selected", tr.dataset.session === id);
  ui.empty.hidden = true;
  ui.head.hidden = false;
  $("session-title").textContent = "";
  $("session-id").textContent = id;
  const session = { id, lastId: null, seen: new Set() };
  view.session = session;
  const signal = view.aborter.signal;
  const commit = (e) => {
    if (!e?.id || session.seen.has(e.id)) return;
    session.seen.add(e.id);
    session.lastId = e.id;
    ui.timeline.add(e);
  };
  session.stream = follow(id, {
    lastId: () => session.lastId,
    // The stream is open (so it holds what comes next); read what came before. Frames the
    // stream also carries are told apart by event id.
    opened: async (resumed) => {
      if (resumed) return;
      const { events, complete } = await listEvents(id, signal);
      if (view?.session !== session) return;
      if (!complete) ui.timeline.note("other", "truncated", null, "older events are not shown");
      events.forEach(commit);
    },
    frame: (f) => {
      if (view?.session !== session) return;
      let data;
      try {
        data = JSON.parse(f.data);
      } catch {
        return;
      }
      if (f.event === "event_start" || f.event === "event_delta") ui.timeline.preview(data);
      else if (f.event === "error") ui.timeline.note("error", "error", null, data?.error?.message || "stream error");
      else {
        commit(data);
        if (f.event.startsWith("session.")) refreshSession().catch(failed);
      }
    },
    state: (s) => {
      if (view?.session === session) $("stream-state").textContent = s;
    },
    fatal: (error) => {
      if (view?.session !== session) return;
      if (!failed(error)) $("stream-state").textContent = `stopped: ${error.message}`;
    },
  });
  refreshSession().catch(failed);
}

window.addEventListener("hashchange", () => openSession(window.location.hash.slice(1)));

// --- the whole page -------------------------------------------------------------------------

function stop() {
  if (!view) return;
  closeSession();
  view.aborter.abort();
  for (const t of view.timers) clearInterval(t);
  view = null;
}

/** Polls `read` every `ms` while the tab is visible; a refused key ends the page's view. */
function every(ms, read) {
  return setInterval(() => {
    if (view && document.visibilityState === "visible") read().catch(failed);
  }, ms);
}

/** Checks access by reading the list: a refusal shows the prompt, success shows the data. */
async function start() {
  stop();
  view = { aborter: new AbortController(), timers: [], session: null };
  ui.signIn.hidden = true;
  ui.connection.textContent = "connecting";
  try {
    await refreshList();
  } catch (error) {
    ui.connection.textContent = "";
    if (!failed(error)) view.timers.push(setTimeout(start, LIST_EVERY_MS));
    return;
  }
  ui.connection.textContent = window.location.host;
  ui.problem.hidden = true;
  ui.viewer.hidden = false;
  ui.signOut.hidden = !key.get();
  refreshAgents().catch(failed);
  view.timers.push(
    every(LIST_EVERY_MS, async () => {
      await refreshList();
      ui.problem.hidden = true;
    }),
    every(SESSION_EVERY_MS, refreshSession),
    every(AGENTS_EVERY_MS, refreshAgents),
  );
  openSession(window.location.hash.slice(1));
}

start();
