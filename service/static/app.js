// The Data Sample page: plain JavaScript, no build step, no external resources.
// Everything that comes from the API is inserted with textContent (never innerHTML).
"use strict";

const POLL_MS = 3000;
const NODE_W = 144, NODE_H = 50, COL_W = 178, ROW_H = 70, PAD = 14;
const SVG_NS = "http://www.w3.org/2000/svg";

// Rendering thousands of pretty-printed records at once makes the page sluggish: show a page.
const PAGE_ROWS = 200;

const state = { token: "", app: null, detail: null, vertex: null, timer: null,
                result: null, subtask: "all", inflight: false, showAll: false };

const $ = (id) => document.getElementById(id);

const ERROR_TEXT = {
  TIMEOUT: "The round did not finish within the timeout.",
  EXECUTOR_UNREACHABLE: "Some executors could not be reached.",
  TOO_MANY_CONCURRENT_ROUNDS: "Too many sampling rounds run on this application (max 5); " +
    "the next poll after the refresh interval tries again.",
  TASK_TERMINATED: "The tasks of this vertex ended (or the application stopped) during the round.",
  INTERNAL_ERROR: "The round failed inside sparkglass (see the service log).",
};

// ------------------------------------------------------------------ token & API
function readToken() {
  const hash = new URLSearchParams(location.hash.slice(1));
  const fromHash = hash.get("token");
  if (fromHash) {
    sessionStorage.setItem("sparkglass-token", fromHash);
    hash.delete("token");
    // Keep the token out of the address bar (and of screenshots, bookmarks, history).
    history.replaceState(null, "", location.pathname + location.search +
      (hash.toString() ? "#" + hash.toString() : ""));
  }
  return sessionStorage.getItem("sparkglass-token") || "";
}

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path) {
  const resp = await fetch(path, { headers: { Authorization: "Bearer " + state.token } });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const detail = body && body.detail ? body.detail : resp.statusText;
    throw new ApiError(resp.status, detail);
  }
  return body;
}

function explain(err) {
  if (err.status === 401) return "The token was rejected (401): enter a valid token above.";
  if (err.status === 403) return "Forbidden (403): your token may not read or start samples here.";
  return (err.status ? `Error ${err.status}: ` : "") + err.message;
}

function setMessage(el, text, level) {
  el.textContent = text || "";
  el.className = "message " + (level || "info");
}

// ------------------------------------------------------------------ applications
async function loadApplications() {
  const select = $("app-select");
  select.textContent = "";
  try {
    const ns = $("namespace").value.trim();
    // Kubernetes mode: a namespace's SparkApplications are read when it is asked for.
    const apps = await api(ns ? `/api/v1/namespaces/${encodeURIComponent(ns)}/applications`
                              : "/api/v1/applications");
    if (!apps.length) {
      setMessage($("app-message"), "No application is registered yet.", "warn");
      return;
    }
    setMessage($("app-message"), "");
    for (const a of apps) {
      const opt = document.createElement("option");
      opt.value = `${a.namespace}/${a.name}`;
      opt.textContent = `${a.namespace} / ${a.name}` +
        (a.pipelineName && a.pipelineName !== a.name ? ` (${a.pipelineName})` : "");
      select.appendChild(opt);
    }
    const wanted = new URLSearchParams(location.hash.slice(1)).get("app");
    if (wanted && apps.some((a) => `${a.namespace}/${a.name}` === wanted)) select.value = wanted;
    await selectApplication(select.value);
  } catch (err) {
    setMessage($("app-message"), explain(err), "error");
  }
}

async function selectApplication(key) {
  stopPolling();
  state.app = key;
  state.vertex = null;
  state.result = null;
  renderResult();
  const [ns, name] = key.split("/");
  try {
    state.detail = await api(`/api/v1/namespaces/${encodeURIComponent(ns)}/applications/` +
      encodeURIComponent(name));
    if (state.detail.planError) {
      setMessage($("app-message"), "Planner: " + state.detail.planError, "warn");
    }
    drawGraph(state.detail);
  } catch (err) {
    setMessage($("app-message"), explain(err), "error");
  }
}

// ------------------------------------------------------------------ graph
function layers(vertices) {
  const byName = new Map(vertices.map((v) => [v.name, v]));
  const depth = new Map();
  const visit = (v) => {
    if (depth.has(v.name)) return depth.get(v.name);
    depth.set(v.name, 0); // guards against cycles in malformed input
    let d = 0;
    for (const i of v.inputs) if (byName.has(i)) d = Math.max(d, visit(byName.get(i)) + 1);
    depth.set(v.name, d);
    return d;
  };
  vertices.forEach(visit);
  return depth;
}

function attributeBadges(v) {
  const adjusted = (v.plan && v.plan.adjusted) || v.attributes || {};
  const out = [];
  if (adjusted.noOutputUntilEndOfInput) {
    out.push(v.plan && v.plan.inheritedFrom ? "EOI*" : "EOI");
  }
  if (adjusted.idempotent) out.push(`IDEM(${(adjusted.idempotent.key || []).join(",")})`);
  if (adjusted.notCacheRecord) out.push("NCR");
  if (v.plan && v.plan.fusionGroup) out.push("FUSED");
  return out;
}

function svg(tag, attrs, parent) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (parent) parent.appendChild(el);
  return el;
}

function drawGraph(detail) {
  const g = $("graph");
  g.textContent = "";
  const depth = layers(detail.vertices);
  const rows = new Map();
  const pos = new Map();
  for (const v of detail.vertices) {
    const d = depth.get(v.name);
    const r = rows.get(d) || 0;
    rows.set(d, r + 1);
    pos.set(v.name, { x: PAD + d * COL_W, y: PAD + r * ROW_H });
  }
  const width = PAD * 2 + (Math.max(0, ...depth.values()) * COL_W) + NODE_W;
  const height = PAD * 2 + (Math.max(1, ...rows.values()) - 1) * ROW_H + NODE_H;
  // Scale down to the panel's width when the graph is wider, never up.
  g.setAttribute("width", "100%");
  g.style.maxWidth = width + "px";
  g.setAttribute("viewBox", `0 0 ${width} ${height}`);

  for (const e of detail.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    const mx = (x1 + x2) / 2;
    const path = svg("path", {
      d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 6},${y2}`,
      class: `edge ${e.kind}`, "data-testid": `edge-${e.from}-${e.to}`, "data-kind": e.kind,
    }, g);
    svg("title", {}, path).textContent = `${e.from} → ${e.to}: ${e.kind}` +
      (e.fused ? " (fused)" : "");
    svg("polygon", {
      points: `${x2},${y2} ${x2 - 7},${y2 - 4} ${x2 - 7},${y2 + 4}`,
      fill: e.kind === "blocking" ? "#b91c1c" : "#8c96a8",
    }, g);
    if (e.kind === "blocking") {
      const t = svg("text", { x: mx, y: (y1 + y2) / 2 - 5, "text-anchor": "middle",
                              class: "edge-label" }, g);
      t.textContent = "blocking";
    }
  }
  for (const v of detail.vertices) {
    const p = pos.get(v.name);
    const node = svg("g", {
      class: `node kind-${v.kind}` + (v.name === state.vertex ? " selected" : ""),
      transform: `translate(${p.x},${p.y})`, "data-testid": `vertex-${v.name}`,
      "data-vertex": v.name,
    }, g);
    svg("rect", { width: NODE_W, height: NODE_H, rx: 6 }, node);
    const name = svg("text", { x: 8, y: 17 }, node);
    name.textContent = v.name.length > 20 ? v.name.slice(0, 19) + "…" : v.name;
    const kind = svg("text", { x: 8, y: 31, class: "kind" }, node);
    kind.textContent = v.kind + (v.python ? " · python" : "") + (v.bounded ? "" : " · stream");
    const badges = attributeBadges(v);
    if (badges.length) {
      const t = svg("text", { x: 8, y: 44, class: "attrs" }, node);
      t.textContent = badges.join(" ");
    }
    const tip = [v.name, `kind: ${v.kind}`];
    if (badges.length) tip.push(`attributes: ${badges.join(", ")}`);
    if (v.plan && v.plan.inheritedFrom) tip.push(`inherited from ${v.plan.inheritedFrom}`);
    for (const n of (v.plan && v.plan.notes) || []) tip.push(n);
    svg("title", {}, node).textContent = tip.join("\n");
    if (v.kind !== "sink") node.addEventListener("click", () => selectVertex(v.name));
  }
}

// ------------------------------------------------------------------ polling
function stopPolling() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

function selectVertex(name) {
  stopPolling();
  state.vertex = name;
  state.result = null;
  state.subtask = "all";
  state.showAll = false;
  document.querySelectorAll("#graph .node").forEach((n) =>
    n.classList.toggle("selected", n.dataset.vertex === name));
  $("vertex-name").textContent = name;
  renderResult();
  poll();
  state.timer = setInterval(poll, POLL_MS);
}

async function poll() {
  if (!state.vertex || !state.app || state.inflight) return;
  state.inflight = true;
  const [ns, app] = state.app.split("/");
  const vertex = state.vertex;
  try {
    const result = await api(`/api/v1/namespaces/${encodeURIComponent(ns)}/applications/` +
      `${encodeURIComponent(app)}/vertices/${encodeURIComponent(vertex)}/data-sample`);
    if (vertex !== state.vertex) return; // the user moved on meanwhile
    state.result = result;
    $("poll-info").textContent = "updated " + new Date().toLocaleTimeString() +
      ` · polling every ${POLL_MS / 1000} s`;
    renderResult();
  } catch (err) {
    state.result = null;
    renderResult();
    setMessage($("status-message"), explain(err), "error");
  } finally {
    state.inflight = false;
  }
}

// ------------------------------------------------------------------ result display
function statusMessage(r) {
  const failed = r.failedSubtasks && r.failedSubtasks.length
    ? ` Failed subtasks: ${r.failedSubtasks.join(", ")}.` : "";
  switch (r.status) {
    case "PENDING":
      return ["Sampling… the first round is running; results appear here when it ends.", "info"];
    case "COMPLETE":
      return [r.materializedAt
        ? `The vertex's materialized output, written at ${formatTime(r.materializedAt)}: ` +
          "each row at most once." : "", "info"];
    case "PARTIAL":
      return [`Partial result: not every subtask answered.${failed} ` +
        (ERROR_TEXT[r.errorCode] || ""), "warn"];
    case "NO_DATA":
      return [noDataText(r), "info"];
    case "DISABLED":
      return ["Sampling is disabled for this application " +
        "(spark.sparkglass.sampling.enabled=false).", "warn"];
    case "FAILED":
      return [`Round failed: ${r.errorCode || "unknown error"}. ` +
        (ERROR_TEXT[r.errorCode] || "") + failed, "error"];
    default:
      return [r.status, "info"];
  }
}

// Why a round saw no row (noDataReason), in the words a Spark user expects.
function noDataText(r) {
  const last = r.lastMicroBatchTimestamp
    ? ` The last micro-batch ended at ${formatTime(r.lastMicroBatchTimestamp)}.` : "";
  switch (r.noDataReason) {
    case "NO_MICRO_BATCH":
      return "No record: the streaming query ran no micro-batch during the round." + last +
        " The next poll after its next micro-batch starts a new round.";
    case "NO_ROWS":
      return "No record: micro-batches ran, and this vertex emitted no row in them.";
    case "QUERY_NOT_ACTIVE":
      return "No record: no streaming query that runs this vertex is active.";
    default:
      return "No record left this vertex during the sampling window.";
  }
}

function formatTime(ms) {
  const d = new Date(ms);
  return d.toISOString().replace("T", " ").replace("Z", " UTC");
}

function prettyJson(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
}

function renderCounters(r) {
  const dl = $("counters");
  dl.textContent = "";
  if (!r || r.status === "PENDING") return;
  const items = [
    ["records", r.totalRecordCount],
    ["round", r.roundId || "–"],
    ["ended", r.endTimestamp ? formatTime(r.endTimestamp) : "–"],
    ["dropped (rate limit)", r.droppedByRateLimit],
    ["dropped (contention)", r.droppedByContention],
  ];
  for (const [k, v] of items) {
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = k;
    dd.textContent = String(v);
    dd.dataset.testid = "counter-" + k.split(" ")[0];
    div.append(dt, dd);
    dl.appendChild(div);
  }
}

function renderSubtasks(r) {
  const bar = $("subtask-bar");
  const select = $("subtask-select");
  const samples = (r && r.samples) || [];
  bar.hidden = !samples.length;
  $("truncated-all").hidden = !(r && r.totalTruncated);
  const failed = new Set((r && r.failedSubtasks) || []);
  const options = [["all", "All subtasks"]];
  const indices = new Set(samples.map((s) => s.subtaskIndex));
  for (const f of failed) indices.add(f);
  for (const i of [...indices].sort((a, b) => a - b)) {
    const n = (samples.find((s) => s.subtaskIndex === i) || { records: [] }).records.length;
    options.push([String(i), `#${i} (${failed.has(i) ? "failed" : n + " records"})`]);
  }
  if (!options.some(([v]) => v === state.subtask)) state.subtask = "all";
  select.textContent = "";
  for (const [value, label] of options) {
    const opt = document.createElement("option");
    opt.value = value;
    opt.textContent = label;
    select.appendChild(opt);
  }
  select.value = state.subtask;
}

function renderRecords(r) {
  const table = $("records");
  const body = table.querySelector("tbody");
  body.textContent = "";
  const samples = ((r && r.samples) || []).filter(
    (s) => state.subtask === "all" || String(s.subtaskIndex) === state.subtask);
  const rows = [];
  for (const s of samples) for (const rec of s.records) rows.push([s.subtaskIndex, rec]);
  rows.sort((a, b) => a[1].sampleTimestamp - b[1].sampleTimestamp);
  table.hidden = !rows.length;
  const more = $("more-records");
  more.hidden = state.showAll || rows.length <= PAGE_ROWS;
  more.textContent = `Show all ${rows.length} records`;
  const shown = state.showAll ? rows : rows.slice(0, PAGE_ROWS);
  for (const [sub, rec] of shown) {
    const tr = document.createElement("tr");
    tr.dataset.testid = "record";
    const time = document.createElement("td");
    time.textContent = formatTime(rec.sampleTimestamp);
    const subtask = document.createElement("td");
    subtask.textContent = "#" + sub;
    const data = document.createElement("td");
    const pre = document.createElement("pre");
    pre.dataset.testid = "record-data";
    pre.textContent = prettyJson(rec.data);
    data.appendChild(pre);
    if (rec.truncated) {
      const mark = document.createElement("span");
      mark.className = "badge truncated";
      mark.dataset.testid = "truncated-marker";
      mark.textContent = "✂ truncated (max-record-length)";
      data.appendChild(mark);
    }
    const type = document.createElement("td");
    type.className = "type";
    type.textContent = rec.dataType;
    tr.append(time, subtask, data, type);
    body.appendChild(tr);
  }
}

function renderResult() {
  const r = state.result;
  const status = $("status");
  status.textContent = r ? r.status : "";
  status.className = "status " + (r ? r.status : "");
  $("stale").hidden = !(r && r.stale);
  if (!state.vertex) {
    $("vertex-name").textContent = "Pick a vertex in the graph";
    setMessage($("status-message"), "");
  } else if (!r) {
    setMessage($("status-message"), "");
  } else {
    const [text, level] = statusMessage(r);
    const el = $("status-message");
    setMessage(el, text, level);
    if (r.status === "PENDING") {
      const spin = document.createElement("span");
      spin.className = "spinner";
      el.prepend(spin);
    }
  }
  renderCounters(r);
  renderSubtasks(r);
  renderRecords(r);
}

// ------------------------------------------------------------------ start
function init() {
  state.token = readToken();
  $("token").value = state.token;
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("sparkglass-token", state.token);
    loadApplications();
  });
  $("namespace").value = new URLSearchParams(location.hash.slice(1)).get("ns") || "";
  $("ns-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    loadApplications();
  });
  $("app-select").addEventListener("change", (ev) => selectApplication(ev.target.value));
  $("subtask-select").addEventListener("change", (ev) => {
    state.subtask = ev.target.value;
    renderRecords(state.result);
  });
  $("more-records").addEventListener("click", () => {
    state.showAll = true;
    renderRecords(state.result);
  });
  if (state.token) loadApplications();
  else setMessage($("app-message"), "Enter a token to start.", "info");
}

document.addEventListener("DOMContentLoaded", init);
