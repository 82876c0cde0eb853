// The convostore inspector: plain JavaScript over the /v1 API, no build step.
// The key lives in this tab's sessionStorage, in localStorage only when "remember"
// is ticked; "Forget key" removes it from both.
"use strict";

const KEY = "convostore.key", OWNER = "convostore.owner";
const state = {
  key: "", owner: "", cursors: [null], page: 0, next: null,
  session: null, stream: null, generation: 0, names: new Map(), nextAfter: null, lastSeq: 0,
};
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value; else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function showError(message) { $("error").textContent = message || ""; }

class Stale extends Error {}

async function api(path, options = {}) {
  const generation = state.generation;
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: "Bearer " + state.key, "Content-Type": "application/json", ...(options.headers || {}) },
  });
  if (generation !== state.generation) throw new Stale("another key is open");
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(response.status + ": " + detail);
  }
  return response.status === 204 ? null : response.json();
}

function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }

async function loadSessions() {
  const params = new URLSearchParams({ size: "10" });
  const cursor = state.cursors[state.page];
  if (cursor) params.set("cursor", cursor); else params.set("order", $("order").value);
  if (state.owner) params.set("owner_id", state.owner);
  const page = await api("/v1/sessions?" + params);
  const body = $("sessions").querySelector("tbody");
  body.replaceChildren();
  for (const summary of page.items) {
    const s = summary.session;
    const title = s.title || "(untitled)";
    const row = el("tr", { "data-id": s.id },
      el("td", { class: "title", title }, title), el("td", {}, s.kind),
      el("td", {}, summary.message_count), el("td", {}, when(s.last_activity_at)));
    row.addEventListener("click", guard(() => openSession(s.id)));
    if (state.session === s.id) row.classList.add("open");
    body.append(row);
  }
  state.next = page.next_cursor;
  $("next-page").disabled = !state.next;
  $("prev-page").disabled = state.page === 0;
  $("page-number").textContent = "page " + (state.page + 1);
}

function who(id) {
  const name = state.names.get(id);
  return name && name !== id ? name + " (" + id + ")" : id;
}

function route(event) {
  const to = (event.recipient_ids || []).map(who).join(", ");
  return (event.author_id ? who(event.author_id) : event.role) + (to ? " \u2192 " + to : "");
}

function link(uri) {
  // Only web addresses become links: a javascript: or data: URI stays text.
  let scheme = "";
  try { scheme = new URL(uri).protocol; } catch (e) { /* not a URL */ }
  if (scheme === "http:" || scheme === "https:") {
    return el("a", { href: uri, rel: "noopener noreferrer", target: "_blank" }, uri);
  }
  return el("code", {}, uri);
}

function fileChip(label, file) {
  const chip = el("span", { class: "chip file" }, label);
  if (file.storage_uri) chip.append(" ", link(file.storage_uri));
  return chip;
}

function renderEvent(event) {
  const classes = ["event"];
  if (event.synthetic) classes.push("synthetic");
  if (event.type === "COMPACTION") {
    const kept = (event.payload && event.payload.kept_event_ids || []).length;
    return el("li", { class: classes.concat("compaction").join(" "), "data-seq": event.seq },
      "\u2702 compaction boundary (keeps " + kept + " events)");
  }
  if (event.type !== "MESSAGE") {
    return el("li", { class: classes.join(" "), "data-seq": event.seq },
      el("div", { class: "route" }, "#" + event.seq + " " + event.type + (event.branch ? " @" + event.branch : "")),
      el("pre", {}, JSON.stringify(event.payload, null, 2)));
  }
  classes.push("role-" + event.role);
  const item = el("li", { class: classes.join(" "), "data-seq": event.seq },
    el("div", { class: "route" }, "#" + event.seq + " " + route(event) + " \u00b7 " + when(event.created_at)
      + (event.branch ? " @" + event.branch : "")),
    el("div", { class: "content" }, event.content));
  if (event.narration) item.append(el("div", { class: "narration" }, event.narration));
  for (const call of event.tool_calls || []) {
    item.append(el("div", {}, el("span", { class: "chip" }, "tool call " + call.name + " [" + call.id + "]"),
      el("pre", {}, JSON.stringify(call.arguments, null, 2))));
  }
  if (event.tool_call_id) item.append(el("span", { class: "chip" }, "result of " + event.tool_call_id));
  for (const file of event.attachments || []) {
    item.append(fileChip("\ud83d\udcce " + file.filename + " (" + file.mime_type + ")", file));
  }
  for (const asset of event.assets || []) item.append(fileChip("asset " + asset.name, asset));
  for (const data of event.data || []) {
    item.append(el("div", {}, el("span", { class: "chip" }, "data " + data.type + (data.title ? ": " + data.title : "")),
      el("pre", {}, JSON.stringify(data.json, null, 2))));
  }
  return item;
}

function closeSession() {
  if (state.stream) state.stream.abort();
  state.stream = null; state.session = null; state.nextAfter = null; state.lastSeq = 0;
  state.names = new Map();
  $("session-title").textContent = "No session open";
  for (const id of ["session-meta", "thread", "log-count"]) $(id).textContent = "";
  $("parts").replaceChildren(); $("log").replaceChildren();
  $("more-events").hidden = true;
  $("live").textContent = "offline"; $("live").className = "live off";
}

function sessionLink(id, label) {
  const a = el("a", { href: "#", "data-id": id }, label);
  a.addEventListener("click", (event) => { event.preventDefault(); guard(() => openSession(id))(); });
  return a;
}

async function openSession(id) {
  showError("");
  closeSession();
  state.session = id;
  for (const row of $("sessions").querySelectorAll("tbody tr")) row.classList.toggle("open", row.dataset.id === id);
  const path = "/v1/sessions/" + encodeURIComponent(id);
  const [session, people, parts] = await Promise.all([
    api(path), api(path + "/participants"), api(path + "/parts"),
  ]);
  if (state.session !== id) return;
  for (const user of people) state.names.set(user.id, user.display_name);
  const held = [session, ...parts.map((p) => p.session)].filter((s) => s.held_with);
  await learnNames(held.map((s) => ({ author_id: s.held_with })));
  if (state.session !== id) return;
  $("session-title").textContent = session.title || "(untitled)";
  $("session-meta").textContent = session.kind + " \u00b7 owner " + session.owner_id + " \u00b7 version " + session.version
    + (Object.keys(session.metadata).length ? " \u00b7 " + JSON.stringify(session.metadata) : "");
  if (session.part_of) {
    $("thread").replaceChildren("side conversation", session.held_with ? " with " + who(session.held_with) : "",
      " of ", sessionLink(session.part_of, "its thread"));
  }
  $("parts").replaceChildren(...parts.map((part) => el("li", {},
    sessionLink(part.session.id, part.session.title || "(untitled part)"),
    " with " + (part.session.held_with ? who(part.session.held_with) : "?") + " \u00b7 " + part.message_count + " messages")));
  await loadEvents(id, null);
}

// Recipients need not have written: their names are looked up once each.
async function learnNames(events) {
  const unknown = new Set();
  for (const e of events) {
    for (const id of [e.author_id, ...(e.recipient_ids || [])]) if (id && !state.names.has(id)) unknown.add(id);
  }
  const found = await Promise.all([...unknown].slice(0, 50).map((id) =>
    api("/v1/users/" + encodeURIComponent(id)).catch((error) => { if (error instanceof Stale) throw error; return null; })));
  for (const user of found) if (user) state.names.set(user.id, user.display_name);
}

async function loadEvents(id, after) {
  const params = new URLSearchParams();
  if ($("active-view").checked) params.set("active_view", "true");
  if (after !== null) params.set("after_seq", String(after));
  const log = await api("/v1/sessions/" + encodeURIComponent(id) + "/events?" + params);
  if (state.session !== id) return;
  await learnNames(log.items);
  if (state.session !== id) return;
  $("log").append(...log.items.map(renderEvent));
  for (const e of log.items) state.lastSeq = Math.max(state.lastSeq, e.seq);
  state.nextAfter = log.next_after_seq;
  $("more-events").hidden = state.nextAfter === null;
  $("log-count").textContent = $("log").children.length + " events" + (state.nextAfter === null ? "" : ", more to load");
  // Live events join the end of the log: follow once the whole log is shown.
  if (state.nextAfter === null) follow(id, state.lastSeq);
  else { $("live").textContent = "load the rest to follow live"; $("live").className = "live off"; }
}

// Live events over Server-Sent Events, read with fetch so the key stays in a header.
async function follow(id, afterSeq) {
  if (state.stream) state.stream.abort();
  const controller = new AbortController();
  state.stream = controller;
  let lastId = String(afterSeq);
  while (!controller.signal.aborted) {
    try {
      const response = await fetch("/v1/sessions/" + encodeURIComponent(id) + "/stream", {
        headers: { Authorization: "Bearer " + state.key, "Last-Event-ID": lastId },
        signal: controller.signal,
      });
      if (!response.ok) throw new Error("stream: " + response.status);
      $("live").textContent = "live"; $("live").className = "live on";
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done || controller.signal.aborted) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, end); buffer = buffer.slice(end + 2);
          const fields = { event: "message", data: "" };
          for (const line of frame.split("\n")) {
            const at = line.indexOf(":");
            if (at <= 0) continue;
            fields[line.slice(0, at)] = line.slice(at + 1).trimStart();
          }
          if (fields.id) lastId = fields.id;
          if (!fields.data || controller.signal.aborted) continue;
          const data = JSON.parse(fields.data);
          if (fields.event === "message" || fields.event === "event") {
            if (!$("active-view").checked || !data.synthetic) {
              const item = renderEvent(data); item.classList.add("new"); $("log").append(item);
            }
          } else if (fields.event === "session") {
            $("session-title").textContent = data.title || "(untitled)";
          } else if (fields.event === "deleted" || fields.event === "revoked") {
            $("session-title").textContent = fields.event === "deleted" ? "(deleted)" : "(key revoked)";
            controller.abort();
          }
        }
      }
    } catch (error) {
      if (controller.signal.aborted) break;
      showError(error.message);
    }
    if (controller.signal.aborted) break;
    $("live").textContent = "reconnecting"; $("live").className = "live off";
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  if (state.stream === controller) { $("live").textContent = "offline"; $("live").className = "live off"; }
}

async function search(event) {
  event.preventDefault();
  const query = $("search-query").value.trim();
  if (!query) return;
  const body = { query, mode: $("search-mode").value, k: 20 };
  if (state.owner) body.owner_id = state.owner;
  const hits = await api("/v1/search", { method: "POST", body: JSON.stringify(body) });
  $("search-results").replaceChildren(...hits.items.map((hit) => {
    const item = el("li", {}, el("b", {}, hit.score.toFixed(3)), " ", hit.message.content);
    item.addEventListener("click", guard(() => openSession(hit.message.session_id)));
    return item;
  }));
}

function clearView() {
  closeSession();
  state.cursors = [null]; state.page = 0; state.next = null;
  $("sessions").querySelector("tbody").replaceChildren();
  $("search-results").replaceChildren();
  $("whoami").textContent = "";
  $("next-page").disabled = true; $("prev-page").disabled = true;
  $("page-number").textContent = "page 1";
}

function storeKey() {
  for (const storage of [sessionStorage, localStorage]) { storage.removeItem(KEY); storage.removeItem(OWNER); }
  const storage = $("remember").checked ? localStorage : sessionStorage;
  storage.setItem(KEY, state.key);
  storage.setItem(OWNER, state.owner);
}

async function start(event) {
  if (event) event.preventDefault();
  // A new key starts from nothing: the previous owner's session, stream and pages go.
  state.generation += 1;
  clearView();
  showError("");
  state.key = $("key").value.trim();
  state.owner = $("owner").value.trim();
  if (!state.key) { showError("paste an API key first"); return; }
  let me;
  try {
    me = await api("/v1/me");
  } catch (error) {
    if (!(error instanceof Stale)) state.key = "";
    throw error;
  }
  storeKey();
  $("whoami").textContent = me.admin ? "admin key" : "owner " + me.owner_id;
  await loadSessions();
}

function forget() {
  state.generation += 1;
  for (const storage of [sessionStorage, localStorage]) { storage.removeItem(KEY); storage.removeItem(OWNER); }
  state.key = ""; state.owner = "";
  $("key").value = ""; $("owner").value = ""; $("remember").checked = false;
  clearView();
  showError("");
}

function guard(action) {
  return (event) => action(event).catch((error) => { if (!(error instanceof Stale)) showError(error.message); });
}

$("login").addEventListener("submit", guard(start));
$("forget").addEventListener("click", forget);
$("search").addEventListener("submit", guard(search));
$("order").addEventListener("change", guard(async () => { state.cursors = [null]; state.page = 0; await loadSessions(); }));
$("next-page").addEventListener("click", guard(async () => {
  state.cursors[state.page + 1] = state.next; state.page += 1; await loadSessions();
}));
$("prev-page").addEventListener("click", guard(async () => { state.page -= 1; await loadSessions(); }));
$("active-view").addEventListener("change", guard(async () => { if (state.session) await openSession(state.session); }));
$("more-events").addEventListener("click", guard(async () => {
  if (state.session && state.nextAfter !== null) await loadEvents(state.session, state.nextAfter);
}));
const remembered = localStorage.getItem(KEY);
$("remember").checked = remembered !== null;
$("key").value = sessionStorage.getItem(KEY) || remembered || "";
$("owner").value = sessionStorage.getItem(OWNER) || localStorage.getItem(OWNER) || "";
if ($("key").value) guard(start)();
