// The convostore inspector: plain JavaScript over the /v1 API, no build step.
"use strict";

const state = { key: "", owner: "", cursors: [null], page: 0, next: null, session: null, stream: null };
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

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: "Bearer " + state.key, "Content-Type": "application/json", ...(options.headers || {}) },
  });
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
    const row = el("tr", { "data-id": s.id },
      el("td", {}, s.title || "(untitled)"), el("td", {}, s.kind),
      el("td", {}, summary.message_count), el("td", {}, when(s.last_activity_at)));
    row.addEventListener("click", () => openSession(s.id).catch((e) => showError(e.message)));
    if (state.session === s.id) row.classList.add("open");
    body.append(row);
  }
  state.next = page.next_cursor;
  $("next-page").disabled = !state.next;
  $("prev-page").disabled = state.page === 0;
  $("page-number").textContent = "page " + (state.page + 1);
}

function route(event) {
  const to = (event.recipient_ids || []).join(", ");
  return (event.author_id || event.role) + (to ? " \u2192 " + to : "");
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
    item.append(el("span", { class: "chip" }, "\ud83d\udcce " + file.filename + " (" + file.mime_type + ")"));
  }
  for (const asset of event.assets || []) item.append(el("span", { class: "chip" }, "asset " + asset.name));
  for (const data of event.data || []) {
    item.append(el("div", {}, el("span", { class: "chip" }, "data " + data.type + (data.title ? ": " + data.title : "")),
      el("pre", {}, JSON.stringify(data.json, null, 2))));
  }
  return item;
}

async function openSession(id) {
  showError("");
  state.session = id;
  for (const row of $("sessions").querySelectorAll("tbody tr")) row.classList.toggle("open", row.dataset.id === id);
  const session = await api("/v1/sessions/" + encodeURIComponent(id));
  $("session-title").textContent = session.title || "(untitled)";
  $("session-meta").textContent = session.kind + " \u00b7 owner " + session.owner_id + " \u00b7 version " + session.version
    + (Object.keys(session.metadata).length ? " \u00b7 " + JSON.stringify(session.metadata) : "");
  const params = new URLSearchParams();
  if ($("active-view").checked) params.set("active_view", "true");
  const log = await api("/v1/sessions/" + encodeURIComponent(id) + "/events?" + params);
  $("log").replaceChildren(...log.items.map(renderEvent));
  const last = log.items.reduce((max, e) => Math.max(max, e.seq), 0);
  follow(id, last);
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
        if (done) break;
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
          if (!fields.data) continue;
          const data = JSON.parse(fields.data);
          if (fields.event === "message" || fields.event === "event") {
            if (!$("active-view").checked || !data.synthetic) {
              const item = renderEvent(data); item.classList.add("new"); $("log").append(item);
            }
          } else if (fields.event === "session") {
            $("session-title").textContent = data.title || "(untitled)";
          } else if (fields.event === "deleted") {
            $("session-title").textContent = "(deleted)"; controller.abort();
          }
        }
      }
    } catch (error) {
      if (controller.signal.aborted) break;
      showError(error.message);
    }
    $("live").textContent = "reconnecting"; $("live").className = "live off";
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
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
    item.addEventListener("click", () => openSession(hit.message.session_id).catch((e) => showError(e.message)));
    return item;
  }));
}

async function start(event) {
  if (event) event.preventDefault();
  state.key = $("key").value.trim();
  state.owner = $("owner").value.trim();
  localStorage.setItem("convostore.key", state.key);
  localStorage.setItem("convostore.owner", state.owner);
  showError("");
  const me = await api("/v1/me");
  $("whoami").textContent = me.admin ? "admin key" : "owner " + me.owner_id;
  state.cursors = [null]; state.page = 0;
  await loadSessions();
}

function guard(action) { return (event) => action(event).catch((error) => showError(error.message)); }

$("login").addEventListener("submit", guard(start));
$("search").addEventListener("submit", guard(search));
$("order").addEventListener("change", guard(async () => { state.cursors = [null]; state.page = 0; await loadSessions(); }));
$("next-page").addEventListener("click", guard(async () => {
  state.cursors[state.page + 1] = state.next; state.page += 1; await loadSessions();
}));
$("prev-page").addEventListener("click", guard(async () => { state.page -= 1; await loadSessions(); }));
$("active-view").addEventListener("change", guard(async () => { if (state.session) await openSession(state.session); }));
$("key").value = localStorage.getItem("convostore.key") || "";
$("owner").value = localStorage.getItem("convostore.owner") || "";
if ($("key").value) guard(start)();
