// The traffic observatory's page: poll /api/state every 150 ms, compute throughput here, draw it on a canvas.
"use strict";

const POLL_MS = 150;
const POINTS = 70;
const fmt = n => Number(n).toLocaleString("en-US");
const $ = id => document.getElementById(id);

const series = {ingress: [], consumer: []};
const rates = {ingress: 0, consumer: 0};
let previous = null;
let busy = false;

function ewma(old, count, oldCount, dt) {
  return 0.62 * old + 0.38 * ((count - oldCount) / dt);
}

function sample(state, now) {
  if (previous) {
    const dt = Math.max(0.001, (now - previous.at) / 1000);
    rates.ingress = ewma(rates.ingress, state.pushed, previous.pushed, dt);
    rates.consumer = ewma(rates.consumer, state.received, previous.received, dt);
  }
  previous = {at: now, pushed: state.pushed, received: state.received};
  for (const k of ["ingress", "consumer"]) {
    series[k].push(rates[k]);
    if (series[k].length > POINTS) series[k].shift();
  }
}

function drawChart() {
  const canvas = $("throughput");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 34;
  ctx.clearRect(0, 0, w, h);
  const top = Math.max(1000, ...series.ingress, ...series.consumer) * 1.1;
  ctx.strokeStyle = "#263442";
  ctx.fillStyle = "#8b9bab";
  ctx.font = "12px system-ui";
  for (let i = 0; i <= 4; i++) {
    const y = pad / 2 + (h - pad) * i / 4;
    ctx.beginPath(); ctx.moveTo(pad * 2, y); ctx.lineTo(w, y); ctx.stroke();
    ctx.fillText(Math.round(top * (1 - i / 4) / 1000) + "k/s", 0, y + 4);
  }
  const colors = {ingress: "#4fb3ff", consumer: "#7ee787"};
  for (const k of ["ingress", "consumer"]) {
    const pts = series[k];
    ctx.strokeStyle = colors[k];
    ctx.lineWidth = 2;
    ctx.beginPath();
    pts.forEach((v, i) => {
      const x = pad * 2 + (w - pad * 2) * i / (POINTS - 1);
      const y = pad / 2 + (h - pad) * (1 - v / top);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

function draw(s) {
  document.body.dataset.run = s.running ? "running" : (s.completed_runs > 0 && s.run_received >= s.run_total ? "complete" : "idle");
  $("producer-pid").textContent = s.producer_pid;
  $("stage-pid").textContent = s.stage_pid;
  $("consumer-pid").textContent = s.consumer_pid;
  $("subscription").textContent = s.subscription;
  $("active").textContent = s.active ? "active" : "cancelled";
  $("active").className = "tag" + (s.active ? "" : " off");
  $("run-status").textContent = document.body.dataset.run;
  $("run-progress").textContent = s.run_total ? `${fmt(s.run_received)} / ${fmt(s.run_total)} received (${fmt(s.run_pushed)} pushed)` : "-";
  $("pushed").textContent = fmt(s.pushed);
  $("received").textContent = fmt(s.received);
  $("outstanding").textContent = fmt(s.outstanding_demand);
  $("ingress-rate").textContent = fmt(Math.round(rates.ingress)) + " events/s";
  $("consumer-rate").textContent = fmt(Math.round(rates.consumer)) + " events/s";
  $("backpressure").textContent = s.backpressured ? "BACK-PRESSURE" : "clear";
  $("backpressure").className = "big " + (s.backpressured ? "on" : "off");
  if (s.backpressured) document.body.dataset.pressureSeen = "yes";
  $("rejected").textContent = fmt(s.rejected_pushes);
  $("duplicates").textContent = fmt(s.duplicates);
  $("gaps").textContent = fmt(s.gaps);
  const once = s.duplicates === 0 && s.gaps === 0;
  $("once").textContent = once ? (s.received ? "yes" : "-") : "NO";
  $("once").className = "big " + (once ? "ok" : "bad");
  const share = Math.min(1, s.buffered / s.buffer_capacity);
  $("pressure-bar").style.width = (100 * share).toFixed(1) + "%";
  $("pressure-bar").className = "fill" + (s.backpressured ? " pressured" : "");
  $("pressure-text").textContent = `${fmt(s.buffered)} / ${fmt(s.buffer_capacity)} buffered`;
  $("last-events").textContent = s.last_events.length ? s.last_events.join(" ") : "-";
  $("revision").textContent = s.revision;
  $("timeline").replaceChildren(...s.activities.slice().reverse().map(a => {
    const li = document.createElement("li");
    li.className = "activity";
    li.dataset.kind = a.kind;
    for (const [text, cls] of [["#" + a.sequence, "seq"], [a.kind, "kind kind-" + a.kind], [`${a.source} -> ${a.target}`, "route"], [fmt(a.amount), "amount"]]) {
      const span = document.createElement("span");
      span.className = cls;
      span.textContent = text;
      li.append(span);
    }
    return li;
  }));
  for (const id of ["run-500k", "run-1m", "push-5k", "ask-5k", "push-50k"]) $(id).disabled = s.running;
  $("stop").disabled = !s.running;
}

async function poll() {
  if (busy) return;
  busy = true;
  try {
    const answer = await fetch("/api/state", {cache: "no-store"});
    const state = await answer.json();
    sample(state, performance.now());
    draw(state);
    drawChart();
  } catch (err) {
    $("message").textContent = "cannot reach the dashboard: " + err;
  } finally {
    busy = false;
  }
}

async function act(path) {
  $("message").textContent = "";
  try {
    const answer = await fetch(path, {method: "POST", cache: "no-store"});
    const doc = await answer.json();
    if (!answer.ok) $("message").textContent = doc.error;
  } catch (err) {
    $("message").textContent = "failed: " + err;
  }
  poll();
}

for (const button of document.querySelectorAll("button[data-action]")) {
  button.addEventListener("click", () => act(button.dataset.action));
}
poll();
setInterval(poll, POLL_MS);
