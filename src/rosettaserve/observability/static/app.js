// The status page: polls /status.json and draws what it says. No library; data is only ever
// put into the page as text (textContent), never as markup.
"use strict";

const INTERVAL_MS = Math.max(250, Number(new URLSearchParams(location.search).get("interval")) || 2000);
const HISTORY = 90; // points kept per chart (3 minutes at the default interval)
const REASON_LABEL = { READY: "Note", UNLOADED: "Unloaded" }; // else the reason is a failure
const STATES = ["READY", "LOADING", "UNLOADING", "UNLOADED", "UNAVAILABLE"];

let previous = null; // the last document, for rates over the poll interval
const history = { rps: [], p99: [], model: new Map() };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

const int = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
function ms(v) {
  if (v === null || v === undefined) return "–";
  if (v >= 100) return v.toFixed(0);
  if (v >= 1) return v.toFixed(2);
  return v.toFixed(3);
}
const rate = (v) => (v === null || v === undefined ? "–" : v >= 100 ? v.toFixed(0) : v.toFixed(1));
function duration(s) {
  if (s < 60) return `${s.toFixed(0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}
const bytes = (b) => (b >= 1 << 30 ? `${(b / (1 << 30)).toFixed(2)} GiB` : `${(b / (1 << 20)).toFixed(0)} MiB`);
const key = (m) => `${m.name}\u0000${m.version}`;

// The q quantile (seconds) of per-bucket counts: linear within the bucket holding the rank.
function quantile(q, counts, bounds) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (!total) return null;
  const rank = q * total;
  let running = 0;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] && running + counts[i] >= rank) {
      if (i >= bounds.length) return bounds[bounds.length - 1];
      const lower = i > 0 ? bounds[i - 1] : 0;
      return lower + ((bounds[i] - lower) * (rank - running)) / counts[i];
    }
    running += counts[i];
  }
  return bounds[bounds.length - 1];
}

function fact(k, v, id) {
  return el("div", { class: "fact" }, el("div", { class: "k" }, k), el("div", { class: "v", id }, v));
}

function renderFacts(doc) {
  const s = doc.server;
  const workers = s.workers > 1 ? `${s.workers} (${s.processes_reporting} reporting)` : "1";
  document.getElementById("version").textContent = `${s.version} · role ${s.role}`;
  document.getElementById("facts").replaceChildren(
    fact("HTTP", s.endpoints.http || "–", "fact-http"),
    fact("gRPC", s.endpoints.grpc || "–", "fact-grpc"),
    fact("Metrics", s.endpoints.metrics || "–", "fact-metrics"),
    fact("Uptime", duration(s.uptime_s), "fact-uptime"),
    fact("Worker processes", workers, "fact-workers"),
    fact("CPU time / memory", `${s.cpu_seconds.toFixed(1)} s / ${bytes(s.rss_bytes)}`, "fact-process"),
  );
}

function badge(state) {
  return el("span", { class: `badge ${STATES.includes(state) ? state : "other"}`, "data-field": "state" }, state);
}

function sparkline(points) {
  const box = svg("svg", { class: "spark", viewBox: "0 0 110 24", preserveAspectRatio: "none" });
  if (points.length > 1) {
    const top = Math.max(...points, 1e-9);
    const step = 110 / Math.max(points.length - 1, 20);
    const start = 110 - step * (points.length - 1);
    const coords = points.map((v, i) => `${(start + i * step).toFixed(1)},${(22 - (20 * v) / top).toFixed(1)}`);
    box.append(svg("polyline", { points: coords.join(" ") }));
  }
  return box;
}

function cell(field, text, numeric = true) {
  return el("td", { class: numeric ? "num" : null, "data-field": field }, text);
}

function modelRows(m, rps) {
  const failed = m.requests_total - (m.requests.success || 0);
  const spark = history.model.get(key(m)) || [];
  const row = el(
    "tr",
    { "data-model": m.name, "data-version": m.version },
    cell("name", m.name, false),
    cell("version", m.version, false),
    el("td", {}, badge(m.state)),
    cell("runtime", m.runtime || "–", false),
    cell("load", m.load_seconds === null ? "–" : `${m.load_seconds.toFixed(2)} s`),
    cell("memory", m.resident_bytes ? bytes(m.resident_bytes) : "–"),
    cell("success", int(m.requests.success || 0)),
    cell("failed", int(failed)),
    cell("rps", rate(rps)),
    cell("p50", ms(m.latency.p50_ms)),
    cell("p90", ms(m.latency.p90_ms)),
    cell("p99", ms(m.latency.p99_ms)),
    cell("queue-p99", ms(m.queue.p99_ms)),
    cell("compute-p50", ms(m.compute.p50_ms)),
    cell("inflight", int(m.inflight)),
    cell("queued", int(m.queued)),
    cell("batch", m.mean_batch_size === null ? "–" : m.mean_batch_size.toFixed(2)),
    cell("executions", int(m.executions)),
    el("td", {}, sparkline(spark)),
  );
  if (!m.reason) return [row];
  const why = el("tr", { class: "reason", "data-reason-for": `${m.name}/${m.version}` },
    el("td", { colspan: "19", "data-field": "reason" }, `${REASON_LABEL[m.state] || "Failed"}: ${m.reason}`));
  return [row, why];
}

function llmRow(m, tps) {
  const l = m.llm;
  const running = l.max_num_seqs ? `${int(l.running)} / ${int(l.max_num_seqs)}` : int(l.running);
  const kv = l.kv_budget_tokens ? `${int(l.kv_tokens)} / ${int(l.kv_budget_tokens)}` : int(l.kv_tokens);
  return el(
    "tr",
    { "data-llm": m.name, "data-version": m.version },
    cell("name", m.name, false), cell("version", m.version, false),
    cell("tps", rate(tps)), cell("tokens", int(l.tokens_generated)), cell("running", running),
    cell("waiting", int(l.waiting)), cell("kv", kv), cell("prefills", int(l.prefills)),
    cell("decode-steps", int(l.decode_steps)), cell("peak-batch", int(l.peak_batch)),
    cell("preempted", int(l.preempted)), cell("cancelled", int(l.cancelled)),
    l.ttft ? cell("ttft-p50", ms(l.ttft.p50_ms)) : el("td", { class: "num muted" }, "–"),
    l.itl ? cell("itl-p50", ms(l.itl.p50_ms)) : el("td", { class: "num muted" }, "–"),
    l.itl ? cell("itl-p99", ms(l.itl.p99_ms)) : el("td", { class: "num muted" }, "–"),
  );
}

function push(list, value) {
  list.push(value);
  if (list.length > HISTORY) list.shift();
}

// Rates and the interval's p99 from the difference between this document and the last.
function update(doc) {
  const dt = previous ? doc.time - previous.time : 0;
  const before = new Map((previous ? previous.models : []).map((m) => [key(m), m]));
  const bounds = doc.buckets_s;
  let allRps = 0;
  const delta = new Array(bounds.length + 1).fill(0);
  const rows = [];
  const llmRows = [];
  for (const m of doc.models) {
    const old = before.get(key(m));
    let rps = null;
    if (old && dt > 0) {
      rps = Math.max(0, m.requests_total - old.requests_total) / dt;
      allRps += rps;
      m.latency.buckets.forEach((c, i) => { delta[i] += Math.max(0, c - old.latency.buckets[i]); });
      const spark = history.model.get(key(m)) || [];
      push(spark, rps);
      history.model.set(key(m), spark);
    }
    rows.push(...modelRows(m, rps));
    if (m.llm) {
      const tps = old && old.llm && dt > 0 ? Math.max(0, m.llm.tokens_generated - old.llm.tokens_generated) / dt : null;
      llmRows.push(llmRow(m, tps));
    }
  }
  document.querySelector("#models tbody").replaceChildren(...rows);
  if (!doc.models.length) {
    document.querySelector("#models tbody").replaceChildren(
      el("tr", {}, el("td", { colspan: "19", class: "muted" }, "No model in the repository.")));
  }
  document.getElementById("llm-card").hidden = llmRows.length === 0;
  document.querySelector("#llm tbody").replaceChildren(...llmRows);
  if (previous && dt > 0) {
    const p99 = quantile(0.99, delta, bounds);
    push(history.rps, allRps);
    push(history.p99, p99 === null ? 0 : p99 * 1000);
    document.getElementById("rps-now").textContent = `now ${rate(allRps)} req/s`;
    document.getElementById("p99-now").textContent = p99 === null ? "no request in the interval" : `now ${ms(p99 * 1000)} ms`;
  }
  drawChart(document.getElementById("chart-rps"), history.rps, rate);
  drawChart(document.getElementById("chart-p99"), history.p99, ms);
  const span = `last ${duration((HISTORY * INTERVAL_MS) / 1000)}`;
  document.getElementById("rps-span").textContent = span;
  document.getElementById("p99-span").textContent = span;
}

function drawChart(box, points, format) {
  const W = 600, H = 160, left = 44, top = 8, bottom = 18;
  const nodes = [];
  const max = niceMax(Math.max(0, ...points));
  for (let i = 0; i <= 4; i++) {
    const y = top + ((H - top - bottom) * i) / 4;
    nodes.push(svg("line", { class: "grid", x1: left, x2: W, y1: y, y2: y }));
    const label = svg("text", { class: "axis", x: left - 6, y: y + 3, "text-anchor": "end" });
    label.textContent = i === 4 ? "0" : format(max * (1 - i / 4));
    nodes.push(label);
  }
  if (points.length > 1) {
    const step = (W - left) / (HISTORY - 1);
    const x0 = W - step * (points.length - 1);
    const y = (v) => top + (H - top - bottom) * (1 - v / max);
    const coords = points.map((v, i) => `${(x0 + i * step).toFixed(1)},${y(v).toFixed(1)}`);
    nodes.push(svg("polygon", { class: "area", points: `${x0},${H - bottom} ${coords.join(" ")} ${W},${H - bottom}` }));
    nodes.push(svg("polyline", { class: "line", points: coords.join(" ") }));
  }
  box.replaceChildren(...nodes);
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function renderStatic(doc) {
  document.getElementById("method").textContent = `Percentiles: ${doc.percentile_method}.`;
  document.getElementById("not-measured").replaceChildren(...doc.not_measured.map((t) => el("li", {}, t)));
  document.getElementById("interval").textContent = `${INTERVAL_MS / 1000} s`;
  const rows = doc.server.protocols.map((p) =>
    el("tr", {}, el("td", {}, p.name), el("td", {}, doc.server.endpoints[p.endpoint] || "–"), el("td", { class: "muted" }, p.path)));
  document.querySelector("#protocols tbody").replaceChildren(...rows);
  const metrics = doc.server.endpoints.metrics || "";
  if (metrics.startsWith("http")) document.getElementById("metrics-link").setAttribute("href", metrics);
}

async function poll() {
  const dot = document.getElementById("dot");
  const updated = document.getElementById("updated");
  try {
    const answer = await fetch("/status.json", { cache: "no-store", credentials: "same-origin" });
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    const doc = await answer.json();
    if (!previous) renderStatic(doc);
    renderFacts(doc);
    update(doc);
    previous = doc;
    dot.className = "dot live";
    updated.textContent = `updated ${new Date(doc.time * 1000).toLocaleTimeString()}`;
    document.body.dataset.polls = String(Number(document.body.dataset.polls) + 1);
    document.body.dataset.updated = String(doc.time);
  } catch (err) {
    dot.className = "dot down";
    updated.textContent = `cannot reach the server (${err.message}); retrying`;
  } finally {
    setTimeout(poll, INTERVAL_MS);
  }
}

poll();
