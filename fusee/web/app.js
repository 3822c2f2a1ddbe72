// fusee's web UI: a runs table that refreshes every second, and a run page with its timeline and
// the signal / cancel / terminate buttons.  Plain JS over the JSON API of fusee.http; every value
// is put in the page as text (never as HTML).
"use strict";

const REFRESH_MS = 1000;
const state = { cursor: null, cursors: [], timer: null, runId: null, token: sessionStorage.getItem("fusee-token") };

const $ = (sel) => document.querySelector(sel);

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c == null ? "" : String(c)));
  return e;
}

function when(t) {
  if (t == null) return "";
  const d = new Date(t * 1000);
  return d.toLocaleString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function json(v) { return JSON.stringify(v, null, 1); }

function badge(status) { return el("span", { class: "status " + status }, status); }

async function call(method, path, body) {
  const headers = {};
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await r.json().catch(() => ({}));
  if (r.status === 401) { showAuth(); throw new Error("a token is needed"); }
  if (!r.ok) throw new Error((data.error && (data.error.code + ": " + data.error.message)) || ("HTTP " + r.status));
  return data;
}

function say(text, isError) {
  const m = $("#message");
  m.textContent = text;
  m.className = "message" + (isError ? " error" : "");
  m.hidden = !text;
}

function showAuth() { $("#auth").hidden = false; }

function live(ok) { $("#live").className = ok ? "live" : "live stale"; $("#live").textContent = ok ? "live" : "not answering"; }

// -- the runs page

async function refreshRuns() {
  const q = new URLSearchParams();
  const status = $("#filter-status").value, type = $("#filter-type").value.trim();
  if (status) q.set("status", status);
  if (type) q.set("type", type);
  if ($("#filter-internal").checked) q.set("internal", "true");
  if (state.cursor) q.set("cursor", state.cursor);
  let data;
  try { data = await call("GET", "api/runs?" + q); live(true); } catch (e) { live(false); return; }
  const body = $("#runs-table tbody");
  const rows = data.runs.map((r) => el("tr", { dataset: { id: r.id, status: r.status } },
    el("td", {}, el("a", { href: "#/runs/" + encodeURIComponent(r.id), class: "run-link" }, r.id)),
    el("td", {}, r.type || ""),
    el("td", { class: "status-cell" }, badge(r.status)),
    el("td", {}, when(r.started)),
    el("td", {}, when(r.finished)),
    el("td", {}, r.run == null ? "" : r.run)));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "6", class: "muted" }, "no runs")));
  body.replaceChildren(...rows);
  $("#runs-total").textContent = data.total + " run" + (data.total === 1 ? "" : "s");
  state.next = data.next;
  $("#page-older").disabled = !data.next;
  $("#page-newest").disabled = !state.cursor;
}

async function loadTypes() {
  try {
    const data = await call("GET", "api/workflows");
    $("#start-type").replaceChildren(...data.workflows.map((w) => el("option", { value: w.name }, w.name + " v" + w.version)));
  } catch (e) { /* shown by the table's refresh */ }
}

// -- the run page

function fields(r) {
  const rows = [["Type", r.type + (r.version != null ? " v" + r.version : "")], ["Run", r.run], ["Shard", r.shard],
    ["Started", when(r.started)], ["Finished", when(r.finished)], ["Input", el("pre", {}, json(r.input))]];
  if (r.status === "completed") rows.push(["Result", el("pre", { id: "run-result" }, json(r.result))]);
  if (r.error) rows.push(["Error", el("pre", { id: "run-error" }, r.error.code + ": " + r.error.message)]);
  if (r.via) rows.push(["Via", r.via]);
  if (r.parked) rows.push(["Parked", "yes (unloaded while it waits; its records are kept)"]);
  return rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v == null ? "" : v)]);
}

function runLink(id, text) { return el("a", { href: "#/runs/" + encodeURIComponent(id) }, text || id); }

function links(r) {
  const out = [];
  const l = r.links || {};
  if (l.parent) out.push(el("p", {}, "Child of ", runLink(l.parent.id), " (run " + l.parent.run + ")"));
  if (l.continued_from) out.push(el("p", {}, "Continued as new from run " + l.continued_from.run + " of this workflow ID"));
  if (l.continued_as_new) out.push(el("p", {}, "Continued as new: ", runLink(r.id, "its latest run")));
  if (l.children) out.push(el("p", {}, "Children: ", ...l.children.flatMap((c, i) => [i ? ", " : "", runLink(c.id)])));
  return out;
}

function entryRow(e) {
  let name = e.name || e.signal || e.id || e.target || e.value_kind || "", outcome = "", detail = "", time = "";
  switch (e.kind) {
    case "start": name = e.type; detail = json(e.input); time = when(e.at); break;
    case "step":
      outcome = e.status + (e.attempts.length > 1 ? " (" + e.attempts.length + " attempts)" : "");
      detail = e.status === "ok" ? json(e.result) : e.status === "error" ? json(e.error) :
        e.attempts.length ? "last failure: " + json(e.attempts[e.attempts.length - 1].error) : "";
      if (e.attempts.length && e.attempts[e.attempts.length - 1].retry_at) time = "retry at " + when(e.attempts[e.attempts.length - 1].retry_at);
      break;
    case "sleep": outcome = e.fired ? "fired" : "sleeping"; time = "until " + when(e.fire_at); break;
    case "wait": outcome = e.outcome || "waiting"; detail = e.outcome === "signal" ? json(e.value) : ""; time = e.deadline ? "deadline " + when(e.deadline) : ""; break;
    case "signal": outcome = "arrived"; detail = json(e.value); break;
    case "value": detail = json(e.value); break;
    case "child": outcome = e.status; detail = e.type + (e.result !== undefined ? " -> " + json(e.result) : e.failure !== undefined ? " -> " + json(e.failure) : ""); break;
    case "send": detail = e.name + ": " + json(e.value); break;
    case "cancel": detail = json(e.reason); break;
    case "end": outcome = e.status; detail = json(e.result !== undefined ? e.result : e.failure !== undefined ? e.failure : e.reason !== undefined ? e.reason : e.next_input); time = when(e.at); break;
  }
  const nameCell = e.kind === "child" ? runLink(e.id) : name;
  return el("tr", { class: "entry " + e.kind, dataset: { kind: e.kind } },
    el("td", {}, e.lsn), el("td", {}, e.kind), el("td", {}, nameCell), el("td", {}, outcome),
    el("td", {}, el("pre", {}, detail)), el("td", {}, time));
}

async function refreshRun() {
  const id = state.runId;
  let r;
  try { r = await call("GET", "api/runs/" + encodeURIComponent(id)); live(true); }
  catch (e) { live(false); if (id === state.runId) say(e.message, true); return; }
  if (id !== state.runId) return;
  $("#run-id").textContent = r.id;
  $("#run-status").textContent = r.status;
  $("#run-status").className = "status " + r.status;
  $("#run-page").dataset.status = r.status;
  $("#run-fields").replaceChildren(...fields(r));
  $("#run-links").replaceChildren(...links(r));
  const running = ["running", "queued", "delayed"].includes(r.status);
  for (const b of ["#signal-send", "#cancel-btn", "#terminate-btn"]) $(b).disabled = !running;
  const waiting = r.timeline.filter((e) => e.kind === "wait" && !e.outcome).pop();
  const nameBox = $("#signal-name");
  if (waiting && !nameBox.value && document.activeElement !== nameBox) nameBox.value = waiting.signal;
  $("#timeline tbody").replaceChildren(...r.timeline.map(entryRow));
}

async function act(path, body, done) {
  try { await call("POST", path, body); say(done, false); } catch (e) { say(e.message, true); }
  refreshRun();
}

// -- routing

function show() {
  clearInterval(state.timer);
  say("");
  const m = location.hash.match(/^#\/runs\/(.+)$/);
  $("#runs-page").hidden = !!m;
  $("#run-page").hidden = !m;
  if (m) {
    state.runId = decodeURIComponent(m[1]);
    $("#signal-name").value = "";
    $("#run-id").textContent = state.runId;
    refreshRun();
    state.timer = setInterval(refreshRun, REFRESH_MS);
  } else {
    state.runId = null;
    refreshRuns();
    loadTypes();
    state.timer = setInterval(refreshRuns, REFRESH_MS);
  }
}

function init() {
  window.addEventListener("hashchange", show);
  $("#auth-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("#auth-token").value;
    sessionStorage.setItem("fusee-token", state.token);
    $("#auth").hidden = true;
    show();
  });
  for (const f of ["#filter-status", "#filter-type", "#filter-internal"]) {
    $(f).addEventListener("change", () => { state.cursor = null; state.cursors = []; refreshRuns(); });
  }
  $("#page-older").addEventListener("click", () => { state.cursors.push(state.cursor); state.cursor = state.next; refreshRuns(); });
  $("#page-newest").addEventListener("click", () => { state.cursor = null; state.cursors = []; refreshRuns(); });
  $("#start-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let input;
    try { input = JSON.parse($("#start-input").value || "null"); } catch (e) { say("the input is not JSON: " + e.message, true); return; }
    try {
      const r = await call("POST", "api/runs", { type: $("#start-type").value, id: $("#start-id").value, input });
      say("started " + r.id, false);
      refreshRuns();
    } catch (e) { say(e.message, true); }
  });
  $("#signal-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    let value;
    try { value = JSON.parse($("#signal-value").value || "null"); } catch (e) { say("the value is not JSON: " + e.message, true); return; }
    const name = $("#signal-name").value;
    act("api/runs/" + encodeURIComponent(state.runId) + "/signal", { name, value }, "signal " + name + " sent");
  });
  $("#cancel-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    act("api/runs/" + encodeURIComponent(state.runId) + "/cancel", { reason: $("#cancel-reason").value || null }, "cancel requested");
  });
  $("#terminate-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    act("api/runs/" + encodeURIComponent(state.runId) + "/terminate", { reason: $("#terminate-reason").value || null }, "terminated");
  });
  show();
}

init();
