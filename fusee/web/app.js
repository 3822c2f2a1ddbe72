// fusee's web UI: a runs table that refreshes every second, a run page with its timeline, its
// updates and streams, and the signal / cancel / terminate / update / resume buttons, and a schedules
// page (pause, resume, trigger, delete, create).  Plain JS over the JSON API of fusee.http; every
// value is put in the page as text (never as HTML).
"use strict";

const REFRESH_MS = 1000;
const state = { cursor: null, cursors: [], timer: null, runId: null, stream: null, token: sessionStorage.getItem("fusee-token") };

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

// replace the rows of tbody only when what they show changed (so a button is not swapped under the pointer)
function rows(tbody, data, make) {
  const key = JSON.stringify(data);
  if (tbody.dataset.key === key) return;
  tbody.dataset.key = key;
  tbody.replaceChildren(...make(data));
}

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

async function loadTypes(select) {
  try {
    const data = await call("GET", "api/workflows");
    $(select).replaceChildren(...data.workflows.map((w) => el("option", { value: w.name }, w.name + " v" + w.version)));
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
    case "update": outcome = e.status; detail = json(e.value) + (e.result !== undefined ? " -> " + json(e.result) : e.error !== undefined ? " -> " + json(e.error) : ""); break;
    case "async": outcome = e.status; detail = e.result !== undefined ? json(e.result) : e.error !== undefined ? json(e.error) : e.started ? "started; waits for its token" : ""; break;
    case "stream": outcome = e.closed ? "closed" : "open"; detail = e.chunks + " chunk" + (e.chunks === 1 ? "" : "s") + (e.by_steps.length ? " (steps: " + e.by_steps.join(", ") + ")" : ""); break;
    case "end": outcome = e.status; detail = json(e.result !== undefined ? e.result : e.failure !== undefined ? e.failure : e.reason !== undefined ? e.reason : e.next_input); time = when(e.at); break;
  }
  const nameCell = e.kind === "child" ? runLink(e.id) : name;
  return el("tr", { class: "entry " + e.kind, dataset: { kind: e.kind } },
    el("td", {}, e.lsn), el("td", {}, e.kind), el("td", {}, nameCell), el("td", {}, outcome),
    el("td", {}, el("pre", {}, detail)), el("td", {}, time));
}

function updateRow(e) {
  const out = e.result !== undefined ? json(e.result) : e.error !== undefined ? json(e.error) : "";
  return el("tr", { dataset: { updateId: e.update_id, status: e.status } },
    el("td", {}, e.lsn), el("td", {}, e.update_id), el("td", {}, e.name), el("td", {}, el("pre", {}, json(e.value))),
    el("td", {}, badge(e.status)), el("td", {}, el("pre", { class: "update-result" }, out)));
}

function streamRow(e) {
  const show = el("button", { type: "button", class: "stream-show", dataset: { name: e.name } }, "Show chunks");
  show.addEventListener("click", () => openStream(e.name));
  return el("tr", { dataset: { stream: e.name } },
    el("td", {}, e.name), el("td", { class: "stream-count" }, e.chunks), el("td", {}, e.closed ? "closed" : "open"),
    el("td", {}, e.by_steps.join(", ")), el("td", {}, show));
}

function chunkItem(c) { return el("li", {}, typeof c === "string" ? c : json(c)); }

function openStream(name) {
  state.stream = { name, offset: 0, ended: false, busy: false, runId: state.runId };
  $("#stream-name").textContent = name;
  $("#stream-state").textContent = "";
  $("#stream-chunks").replaceChildren();
  $("#stream-view").hidden = false;
  $("#stream-view").dataset.name = name;
  readStream();
}

// the chunks from the stream's offset, appended (each chunk is read once: a chunk read never changes)
async function readStream() {
  const s = state.stream;
  if (!s || s.ended || s.busy || s.runId !== state.runId) return;
  s.busy = true;
  try {
    const path = "api/runs/" + encodeURIComponent(s.runId) + "/streams/" + encodeURIComponent(s.name) + "?offset=" + s.offset;
    const data = await call("GET", path);
    if (state.stream !== s) return;
    $("#stream-chunks").append(...data.chunks.map(chunkItem));
    s.offset = data.next;
    s.ended = data.ended;
    $("#stream-state").textContent = s.offset + " chunk" + (s.offset === 1 ? "" : "s") + (s.ended ? ", ended" : ", reading as they come");
    $("#stream-view").dataset.ended = s.ended;
  } catch (e) { say(e.message, true); } finally { s.busy = false; }
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
  const running = ["running", "queued", "delayed", "paused"].includes(r.status);
  for (const b of ["#signal-send", "#cancel-btn", "#terminate-btn", "#update-send"]) $(b).disabled = !running;
  $("#resume-form").hidden = r.status !== "paused";
  const updates = r.timeline.filter((e) => e.kind === "update");
  $("#updates-box").hidden = !updates.length;
  rows($("#updates tbody"), updates, (u) => u.map(updateRow));
  const streams = r.timeline.filter((e) => e.kind === "stream");
  $("#streams-box").hidden = !streams.length;
  rows($("#streams tbody"), [r.id, streams], ([, x]) => x.map(streamRow));
  readStream();
  const waiting = r.timeline.filter((e) => e.kind === "wait" && !e.outcome).pop();
  const nameBox = $("#signal-name");
  if (waiting && !nameBox.value && document.activeElement !== nameBox) nameBox.value = waiting.signal;
  $("#timeline tbody").replaceChildren(...r.timeline.map(entryRow));
}

async function act(path, body, done) {
  try { await call("POST", path, body); say(done, false); } catch (e) { say(e.message, true); }
  refreshRun();
}

// -- the schedules page

function every(seconds) {
  for (const [unit, n] of [["d", 86400], ["h", 3600], ["m", 60]]) if (seconds % n === 0) return seconds / n + unit;
  return seconds + "s";
}

function scheduleRow(s) {
  const path = "api/schedules/" + encodeURIComponent(s.name);
  const button = (cls, text, method, sub, done) => {
    const b = el("button", { type: "button", class: cls }, text);
    b.addEventListener("click", async () => {
      try {
        const r = await call(method, path + sub, method === "POST" ? {} : undefined);
        say(done(r), false);
      } catch (e) { say(e.message, true); }
      refreshSchedules();
    });
    return b;
  };
  const last = s.recent.length ? s.recent[s.recent.length - 1] : null;
  const spec = s.cron ? "cron " + s.cron + (s.timezone ? " (" + s.timezone + ")" : " (UTC)") : "every " + every(s.every);
  return el("tr", { dataset: { name: s.name, state: s.state } },
    el("td", {}, s.name), el("td", {}, s.workflow), el("td", {}, spec), el("td", {}, s.overlap),
    el("td", { class: "status-cell" }, badge(s.state)),
    el("td", { class: "next" }, s.next == null ? "" : when(s.next)),
    el("td", {}, ...s.running.flatMap((id, i) => [i ? ", " : "", runLink(id)])),
    el("td", { class: "last" }, last ? runLink(last.id) : ""),
    el("td", { class: "buttons" },
      s.state === "paused" ? button("sched-resume", "Resume", "POST", "/resume", () => "schedule " + s.name + " resumed")
        : button("sched-pause", "Pause", "POST", "/pause", () => "schedule " + s.name + " paused"),
      button("sched-trigger", "Trigger now", "POST", "/trigger", (r) => "started " + r.id),
      button("sched-delete danger", "Delete", "DELETE", "", () => "schedule " + s.name + " deleted")));
}

async function refreshSchedules() {
  let data;
  try { data = await call("GET", "api/schedules"); live(true); } catch (e) { live(false); return; }
  rows($("#schedules-table tbody"), data.schedules, (list) => list.length ? list.map(scheduleRow)
    : [el("tr", {}, el("td", { colspan: "9", class: "muted" }, "no schedules"))]);
  $("#schedules-total").textContent = data.schedules.length + " schedule" + (data.schedules.length === 1 ? "" : "s");
}

// -- routing

function show() {
  clearInterval(state.timer);
  say("");
  const m = location.hash.match(/^#\/runs\/(.+)$/);
  const schedules = location.hash === "#/schedules";
  $("#runs-page").hidden = !!m || schedules;
  $("#run-page").hidden = !m;
  $("#schedules-page").hidden = !schedules;
  if (m) {
    state.runId = decodeURIComponent(m[1]);
    state.stream = null;
    $("#stream-view").hidden = true;
    $("#signal-name").value = "";
    $("#run-id").textContent = state.runId;
    // nothing of the page shown before (another run's status, fields, links) stays under this id
    $("#run-status").textContent = "";
    $("#run-status").className = "status";
    delete $("#run-page").dataset.status;
    $("#run-fields").replaceChildren();
    $("#run-links").replaceChildren();
    refreshRun();
    state.timer = setInterval(refreshRun, REFRESH_MS);
  } else if (schedules) {
    state.runId = null;
    refreshSchedules();
    loadTypes("#schedule-workflow");
    state.timer = setInterval(refreshSchedules, REFRESH_MS);
  } else {
    state.runId = null;
    refreshRuns();
    loadTypes("#start-type");
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
  $("#resume-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    act("api/runs/" + encodeURIComponent(state.runId) + "/resume", {}, "resumed");
  });
  $("#update-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let value;
    try { value = JSON.parse($("#update-value").value || "null"); } catch (e) { say("the value is not JSON: " + e.message, true); return; }
    const name = $("#update-name").value;
    try {
      const r = await call("POST", "api/runs/" + encodeURIComponent(state.runId) + "/update", { name, value });
      say("update " + name + " answered " + json(r.result), false);
    } catch (e) { say(e.message, true); }
    refreshRun();
  });
  $("#schedule-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    let input;
    try { input = JSON.parse($("#schedule-input").value || "null"); } catch (e) { say("the input is not JSON: " + e.message, true); return; }
    const body = { name: $("#schedule-name").value, workflow: $("#schedule-workflow").value, input, overlap: $("#schedule-overlap").value };
    const cron = $("#schedule-cron").value.trim(), period = $("#schedule-every").value.trim();
    if (cron) body.cron = cron;
    if (period) body.every = period;
    try {
      const r = await call("POST", "api/schedules", body);
      say("schedule " + r.name + " created", false);
    } catch (e) { say(e.message, true); }
    refreshSchedules();
  });
  show();
}

init();
