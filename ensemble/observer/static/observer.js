// The observer's pages: poll the JSON endpoints and draw them (no framework, no build step).
"use strict";

const REFRESH_MS = 1000;

function el(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const kid of kids) {
    if (kid === null || kid === undefined) continue;
    node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return node;
}

function pidLink(ref) {
  if (!ref) return el("span", {class: "muted"}, "-");
  if (!ref.url) return el("span", {class: "pid"}, ref.text);
  return el("a", {class: "pid", href: "/process/" + encodeURIComponent(ref.url)}, ref.text);
}

function bytes(n) {
  if (n === null || n === undefined) return "-";
  if (n < 10 * 1024) return n + " B";
  if (n < 10 * 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1048576).toFixed(1) + " MiB";
}

async function getJSON(url) {
  const answer = await fetch(url, {cache: "no-store"});
  const doc = await answer.json();
  return {status: answer.status, doc};
}

function showProblem(text) {
  const p = document.getElementById("problem");
  p.hidden = !text;
  p.textContent = text || "";
}

function stamp() {
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

// ---- the index page -------------------------------------------------------

let lastProcesses = [];
const drawn = {};

// Redraw a section only when its data changed, so a link is not replaced under the pointer.
function changed(section, doc) {
  const text = JSON.stringify(doc);
  if (drawn[section] === text) return false;
  drawn[section] = text;
  return true;
}

function drawProcesses(doc) {
  document.getElementById("node").textContent = "node " + doc.node;
  lastProcesses = doc.processes;
  const query = document.getElementById("filter").value.trim().toLowerCase();
  if (!changed("processes", [query, doc])) return;
  const body = document.querySelector("#processes tbody");
  const rows = [];
  for (const p of doc.processes) {
    const text = [p.pid, p.name, p.status, p.current_function, p.initial_call, p.dispatcher].join(" ").toLowerCase();
    if (query && !text.includes(query)) continue;
    rows.push(el("tr", {"data-pid": p.url || p.pid},
      el("td", {}, pidLink({text: p.pid, url: p.url})),
      el("td", {class: "name"}, p.name || ""),
      el("td", {class: "status-" + p.status}, p.status),
      el("td", {class: "num"}, p.message_queue_len ?? "-"),
      el("td", {class: "num"}, bytes(p.memory)),
      el("td", {}, p.dispatcher || ""),
      el("td", {}, p.carrier || ""),
      el("td", {class: "code"}, p.current_function || ""),
      el("td", {class: "code"}, p.initial_call || "")));
  }
  body.replaceChildren(...rows);
  document.getElementById("process-count").textContent = `(${doc.count})`;
}

function treeNode(node) {
  const label = el("span", {class: "label"},
    el("span", {class: "kind"}, node.type),
    node.id !== null ? el("span", {class: "child-id"}, node.id + " ") : null,
    node.pid ? pidLink({text: node.pid, url: node.url}) : null,
    node.name ? el("span", {class: "muted"}, " " + node.name) : null,
    node.state !== "ok" ? el("span", {class: "note"}, node.state) : null);
  const li = el("li", {class: "node-" + node.type, "data-pid": node.url || ""}, label);
  if (node.children.length) li.append(el("ul", {}, ...node.children.map(treeNode)));
  return li;
}

function drawSupervision(doc) {
  const box = document.getElementById("supervision");
  if (!changed("supervision", doc)) return;
  if (!doc.trees.length) {
    box.replaceChildren(el("p", {class: "muted"}, "no supervisor running"));
    return;
  }
  box.replaceChildren(...doc.trees.map(t => el("ul", {class: "tree"}, treeNode(t))));
}

function drawApplications(doc) {
  const body = document.querySelector("#applications tbody");
  if (!changed("applications", doc)) return;
  const rows = doc.applications.map(a => el("tr", {}, el("td", {}, a.name), el("td", {}, pidLink(a.supervisor))));
  if (!rows.length) rows.push(el("tr", {}, el("td", {colspan: "2", class: "muted"}, doc.error || "no application running")));
  body.replaceChildren(...rows);
}

function drawDispatchers(doc) {
  const box = document.getElementById("dispatchers");
  if (!changed("dispatchers", doc)) return;
  box.replaceChildren(...doc.dispatchers.map(d => {
    const most = Math.max(1, ...d.carriers.map(c => c.processes));
    return el("div", {class: "dispatcher", "data-dispatcher": d.name},
      el("h3", {}, d.name + " ", el("span", {class: "muted"},
        `${d.processes} process${d.processes === 1 ? "" : "es"} on ${d.carriers.length} carrier${d.carriers.length === 1 ? "" : "s"} in use` +
        (d.defined ? "" : " (shut down)"))),
      ...d.carriers.map(c => el("div", {class: "carrier", "data-carrier": c.name},
        el("span", {class: "code"}, c.name),
        el("div", {class: "bar", style: `width: ${Math.round(100 * c.processes / most)}%`}),
        el("span", {class: "num"}, c.processes))));
  }));
}

async function refreshIndex() {
  try {
    const [procs, sup, apps, disp] = await Promise.all(
      ["/api/processes", "/api/supervision", "/api/applications", "/api/dispatchers"].map(getJSON));
    drawProcesses(procs.doc);
    drawSupervision(sup.doc);
    drawApplications(apps.doc);
    drawDispatchers(disp.doc);
    showProblem("");
    stamp();
  } catch (err) {
    showProblem("cannot reach the node: " + err);
  }
}

// ---- the process page -----------------------------------------------------

function pidFromPath() {
  return decodeURIComponent(location.pathname.slice("/process/".length));
}

function fillList(id, refs) {
  const items = refs.map(r => el("li", {}, pidLink(r)));
  if (!items.length) items.push(el("li", {class: "muted"}, "none"));
  document.getElementById(id).replaceChildren(...items);
}

function drawProcess(doc) {
  const facts = [
    ["registered name", doc.name || "-"], ["status", doc.status], ["mailbox", doc.message_queue_len],
    ["memory", bytes(doc.memory)], ["dispatcher", doc.dispatcher], ["carrier", doc.carrier],
    ["current function", doc.current_function || "-"], ["initial call", doc.initial_call || "-"],
    ["trap_exit", String(doc.trap_exit)],
  ];
  document.querySelector("#facts tbody").replaceChildren(
    ...facts.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {class: "code", "data-fact": k}, v))));
  fillList("links", doc.links);
  fillList("monitors", doc.monitors);
  fillList("monitored_by", doc.monitored_by);
  fillList("ancestors", doc.ancestors);
  const st = doc.state;
  const source = {sys: `sys.get_status: module ${st.module}, ${st.status}`, cell: "the state cell (ensemble.state)"}[st.kind];
  document.getElementById("state-source").textContent = source || st.kind;
  document.getElementById("state").textContent = st.state !== undefined ? st.state : st.reason;
  document.getElementById("message-count").textContent = `(${doc.message_queue_len})`;
  document.getElementById("messages").replaceChildren(...doc.messages.map(m => el("li", {}, m)));
}

let stopped = false;

async function refreshProcess() {
  if (stopped) return;
  const pid = pidFromPath();
  try {
    const {status, doc} = await getJSON("/api/processes/" + encodeURIComponent(pid));
    if (status === 200) {
      drawProcess(doc);
      showProblem("");
    } else {
      const gone = document.getElementById("gone");
      gone.hidden = false;
      gone.textContent = doc.error;
      document.getElementById("process").hidden = status === 404 || status === 400;
      if (status === 404 || status === 400) stopped = true;
    }
    stamp();
  } catch (err) {
    showProblem("cannot reach the node: " + err);
  }
}

async function kill() {
  const button = document.getElementById("kill");
  button.disabled = true;
  const pid = pidFromPath();
  try {
    const answer = await fetch("/api/processes/" + encodeURIComponent(pid) + "/kill",
      {method: "POST", headers: {"X-Ensemble-Observer": "1"}});
    const doc = await answer.json();
    document.getElementById("kill-result").textContent = answer.ok ? "killed " + doc.killed : doc.error;
  } catch (err) {
    document.getElementById("kill-result").textContent = "failed: " + err;
  }
  await refreshProcess();
}

function start() {
  const page = document.body.dataset.page;
  if (page === "index") {
    document.getElementById("filter").addEventListener("input", () =>
      drawProcesses({node: document.getElementById("node").textContent.slice(5), count: lastProcesses.length, processes: lastProcesses}));
    refreshIndex();
    setInterval(refreshIndex, REFRESH_MS);
  } else {
    document.getElementById("pid").textContent = "<" + pidFromPath().replace(/^<|>$/g, "") + ">";
    document.getElementById("kill").addEventListener("click", kill);
    refreshProcess();
    setInterval(refreshProcess, REFRESH_MS);
  }
}

start();
