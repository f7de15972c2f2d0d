// The Data Sample page: plain JavaScript, no build step, no external resources.
// Everything that comes from the API is inserted with textContent (never innerHTML).
"use strict";

const POLL_MS = 3000;
// The metrics' history (the driver's last minutes) is asked for with the first refresh and
// every HISTORY_EVERY refreshes (30 s); the readings in between are added to it here.
const HISTORY_EVERY = 10;
// COL_W - NODE_W: the gap between columns fits an edge's "blocking" label (about 40 px).
// A node's last line (y 76–86) is its rows/s sparkline.
const NODE_W = 144, NODE_H = 90, COL_W = 196, ROW_H = 110, PAD = 14;
const SVG_NS = "http://www.w3.org/2000/svg";

// Only one page of rows is in the DOM: thousands of rows at once make the page sluggish,
// while sorting and searching run over all loaded records in memory.
const PAGE_ROWS = 100;
// At most this many columns (fields of the type first, then keys seen in the records).
const MAX_COLUMNS = 200;
// Nested values and long strings are shown cut to this many characters, expandable.
const COMPACT_CHARS = 80;

const state = { token: "", app: null, apps: new Map(), detail: null, vertex: null, timer: null,
                result: null, resultKey: null, subtask: "all", inflight: null,
                // the records grid: all loaded rows, the filtered+sorted view, its page
                rows: [], columns: [], view: [], page: 0, sort: null, search: "",
                json: false, open: new Set(),
                // live metrics of the selected application's pipeline
                metricsTimer: null, metricsInflight: false, metricNodes: new Map(),
                expectNodes: new Map(), sparkNodes: new Map(), metrics: null,
                history: null, metricsPolls: 0,
                // what the rounds of the selected vertex ask for (REST kind/filter/expectation)
                request: { kind: "output", filter: "", expectation: "" } };

// Columns the page adds to the grid from a record's labels (not from its data).
const LABEL_COLUMNS = { "@expectations": "failed expectations", "@error": "error" };
const KINDS = ["output", "violations", "errors"];

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

// GET path; with `held` (an ETag of a body already shown) an unchanged answer is a bodiless
// 304 and this returns null. Otherwise {body, etag}.
async function apiConditional(path, held) {
  const headers = { Authorization: "Bearer " + state.token };
  if (held) headers["If-None-Match"] = held;
  // no-store: the page keeps the body itself, and a 304 must reach this code.
  const resp = await fetch(path, { headers, cache: "no-store" });
  if (resp.status === 304) return null;
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (!resp.ok) {
    const detail = body && body.detail ? body.detail : resp.statusText;
    throw new ApiError(resp.status, detail);
  }
  return { body, etag: resp.headers.get("ETag") };
}

async function api(path) {
  return (await apiConditional(path, null)).body;
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
    // Applications whose driver answers come first. Those whose driver ended (a run that
    // stopped, or a demo restarted since) stay listed, marked, for their last results, but
    // the page never picks one itself: all it could show of them is an Error 502.
    const ordered = [...apps.filter((a) => !driverEnded(a)), ...apps.filter(driverEnded)];
    state.apps = new Map(ordered.map((a) => [`${a.namespace}/${a.name}`, a]));
    for (const a of ordered) {
      const opt = document.createElement("option");
      opt.value = `${a.namespace}/${a.name}`;
      opt.textContent = `${a.namespace} / ${a.name}` +
        (kindLabel(a) ? ` [${kindLabel(a)}]` : "") +
        (a.pipelineName && a.pipelineName !== a.name ? ` (${a.pipelineName})` : "") +
        (driverEnded(a) ? " (ended)" : "");
      opt.dataset.driverState = a.driverState || "unknown";
      if (driverEnded(a)) opt.title = endedText(a);
      select.appendChild(opt);
    }
    const wanted = new URLSearchParams(location.hash.slice(1)).get("app");
    if (wanted && state.apps.has(wanted)) {
      select.value = wanted;  // asked for by name: shown whatever its driver's state
    } else if (ordered.every(driverEnded)) {
      const none = document.createElement("option");
      none.value = "";
      none.disabled = true;
      none.textContent = "— pick an application —";
      select.prepend(none);
      select.value = "";
      setMessage($("app-message"), "No application's driver answers: each is marked " +
        "(ended). Pick one to look at it.", "warn");
      return;
    } else {
      select.value = `${ordered[0].namespace}/${ordered[0].name}`;
    }
    await selectApplication(select.value);
  } catch (err) {
    setMessage($("app-message"), explain(err), "error");
  }
}

// Another operator's SparkApplication is marked with that operator's name (sparkglass's
// own, and every local application, are not marked).
const KIND_LABELS = {
  "sparkoperator.k8s.io/v1beta2": "Kubeflow",
  "spark.apache.org/v1": "Apache",
};
function kindLabel(a) { return (a && KIND_LABELS[a.apiVersion]) || ""; }

// Whether the service found the application's driver gone (it did not answer its probe).
function driverEnded(a) { return a.driverState === "ended"; }

function endedText(a) {
  return "The driver of this application does not answer" + (a.lastSeenAt
    ? ` (last seen ${new Date(a.lastSeenAt).toLocaleString()})` : "") +
    ": new rounds and live metrics are unavailable.";
}

async function selectApplication(key) {
  stopPolling();
  stopMetrics();
  const listed = state.apps.get(key);
  setMessage($("app-message"), listed && driverEnded(listed) ? endedText(listed) : "",
    listed && driverEnded(listed) ? "warn" : "info");
  state.app = key;
  const kind = $("app-kind");
  kind.textContent = kindLabel(listed);
  kind.title = listed && kindLabel(listed) ? `${listed.apiVersion} SparkApplication` : "";
  kind.hidden = !kindLabel(listed);
  state.vertex = null;
  state.result = null;
  state.metrics = null;
  state.history = null;
  state.metricsPolls = 0;
  $("request-form").hidden = true;
  $("expectations").hidden = true;
  renderResult();
  const [ns, name] = key.split("/");
  try {
    state.detail = await api(`/api/v1/namespaces/${encodeURIComponent(ns)}/applications/` +
      encodeURIComponent(name));
    if (state.detail.planError) {
      setMessage($("app-message"), "Planner: " + state.detail.planError, "warn");
    }
    drawGraph(state.detail);
    pollMetrics();
    state.metricsTimer = setInterval(pollMetrics, POLL_MS);
  } catch (err) {
    setMessage($("app-message"), explain(err), "error");
  }
}

// ------------------------------------------------------------------ live metrics
function stopMetrics() {
  if (state.metricsTimer) clearInterval(state.metricsTimer);
  state.metricsTimer = null;
  $("pipeline-metrics-bar").hidden = true;
  $("metrics-message").textContent = "";
}

function formatRate(x) {
  if (x >= 1000) return Math.round(x).toLocaleString("en-US");
  return x.toFixed(1);
}

// A duration in ms ("–" when unknown).
function formatMs(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

// An event-time watermark (ms since the epoch; "–" when the queries have none, "none yet"
// before the first event moved it).
function formatWatermark(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms > 0 ? new Date(ms).toLocaleTimeString() : "none yet";
}

// ------------------------------------------------------------------ sparklines
const PIPELINE_SERIES = ["microBatches", "inputRowsPerSecond", "processedRowsPerSecond",
  "batchDurationMs", "latencyMs", "eventTimeWatermark", "stateRows"];
const VERTEX_SERIES = ["rowsTotal", "rowsPerSecond", "processedRowsPerSecond",
  "batchDurationMs", "latencyMs", "eventTimeWatermark", "stateRows"];

// Add a reading between two history refreshes as a point of the history (at its
// observedAt), dropping points older than the history's window.
function addToHistory(m) {
  const h = state.history;
  if (!h || !m.observedAt) return;
  const n = h.timestamps.length;
  if (n && m.observedAt <= h.timestamps[n - 1]) return;
  h.timestamps.push(m.observedAt);
  for (const key of PIPELINE_SERIES) (h[key] = h[key] || []).push(m[key] ?? null);
  for (const [vertex, series] of Object.entries(h.vertices || {})) {
    const v = (m.vertices || {})[vertex];
    for (const key of VERTEX_SERIES) {
      (series[key] = series[key] || []).push(v ? v[key] ?? null : null);
    }
  }
  let drop = 0;
  while (drop < h.timestamps.length &&
         h.timestamps[drop] < m.observedAt - h.windowSeconds * 1000) drop++;
  if (drop) {
    h.timestamps.splice(0, drop);
    for (const key of PIPELINE_SERIES) h[key].splice(0, drop);
    for (const series of Object.values(h.vertices || {})) {
      for (const key of VERTEX_SERIES) series[key].splice(0, drop);
    }
  }
}
// A small time series drawn as inline SVG into `el` (an <svg> or <g>), `w`×`h` px: one path
// over the points that have a value (null: none), broken where a value is missing; x is the
// time (ms) from the first point with a value to the last, y from min(0, lowest) to the
// highest (from the lowest when `zero` is false: timestamps). `data-points` holds how many
// points have a value.
function drawSpark(el, times, values, w, h, zero = true) {
  el.textContent = "";
  const idx = [];
  (values || []).forEach((v, i) => {
    if (v !== null && v !== undefined && Number.isFinite(v) && times[i] !== undefined) idx.push(i);
  });
  el.setAttribute("data-points", String(idx.length));
  if (!idx.length) return;
  const t0 = times[idx[0]], t1 = times[idx[idx.length - 1]];
  const vals = idx.map((i) => values[i]);
  const lo = zero ? Math.min(0, ...vals) : Math.min(...vals), hi = Math.max(...vals);
  const x = (t) => (t1 > t0 ? ((t - t0) / (t1 - t0)) * w : w);
  const y = (v) => (hi > lo ? h - ((v - lo) / (hi - lo)) * (h - 1) : h - 1) - 0.5;
  let d = "", prev = -2;
  for (const i of idx) {
    d += `${i === prev + 1 ? "L" : "M"}${x(times[i]).toFixed(1)},${y(values[i]).toFixed(1)}`;
    prev = i;
  }
  svg("path", { d, class: "spark-line" }, el);
  const last = idx[idx.length - 1];
  svg("circle", { cx: x(times[last]).toFixed(1), cy: y(values[last]).toFixed(1), r: 1.6,
                  class: "spark-dot" }, el);
}

// A standalone sparkline (<svg>) of one series of the history, or null without a history.
// `format` renders a value in the tooltip; a watermark (a timestamp) is drawn from its lowest.
function sparkSvg(history, values, testid, what, format = fmt) {
  if (!history || !values) return null;
  const el = svg("svg", { class: "spark", width: 96, height: 18, viewBox: "0 0 96 18",
                          "data-testid": testid });
  drawSpark(el, history.timestamps, values, 96, 18, format !== formatWatermark);
  svg("title", {}, el).textContent = sparkTitle(history, values, what, format);
  return el;
}

// The tooltip of a sparkline: what, over which time, lowest and highest.
function sparkTitle(history, values, what, format = fmt) {
  const known = (values || []).filter((v) => v !== null && v !== undefined);
  const mins = Math.round(history.windowSeconds / 60);
  if (!known.length) return `${what}: no value in the last ${mins} min`;
  const since = new Date(history.timestamps[0]).toLocaleTimeString();
  return `${what} since ${since} (last ${mins} min, a point per ` +
    `${history.resolutionSeconds} s): ${format(Math.min(...known))} to ` +
    `${format(Math.max(...known))}`;
}

// One request per refresh for the whole pipeline: state, micro-batches, rows per vertex.
async function pollMetrics() {
  // A hidden tab asks nothing: the driver's progress is read for pages someone looks at.
  if (!state.app || state.metricsInflight || document.hidden) return;
  state.metricsInflight = true;
  const app = state.app;
  const [ns, name] = app.split("/");
  const withHistory = state.metricsPolls % HISTORY_EVERY === 0;
  try {
    const m = await api(`/api/v1/namespaces/${encodeURIComponent(ns)}/applications/` +
      `${encodeURIComponent(name)}/progress` + (withHistory ? "?history=true" : ""));
    if (app !== state.app) return;
    state.metricsPolls += 1;
    if (withHistory) state.history = m.history || null;
    else addToHistory(m);
    m.history = state.history;
    renderMetrics(m);
    $("metrics-message").textContent = "";
  } catch (err) {
    if (app !== state.app) return;
    $("pipeline-metrics-bar").hidden = true;
    for (const t of state.metricNodes.values()) t.textContent = "";
    for (const el of state.expectNodes.values()) clearExpectationNode(el);
    for (const el of state.sparkNodes.values()) el.textContent = "";
    $("vertex-metrics").hidden = true;
    $("metrics-message").textContent = "Live metrics unavailable: " + explain(err);
  } finally {
    state.metricsInflight = false;
  }
}

function renderMetrics(m) {
  $("pipeline-metrics-bar").hidden = false;
  const st = $("query-state");
  st.textContent = m.state;
  st.className = "query-state " + m.state;
  st.title = m.failed ? "failed: " + m.failed : `${m.activeQueries} active streaming queries`;
  const dl = $("pipeline-metrics");
  dl.textContent = "";
  const h = m.history || null;
  // [label, value, test id, series of the history drawn beside it]
  const items = [
    ["micro-batches", fmt(m.microBatches), "micro-batches", null],
    ["input", formatRate(m.inputRowsPerSecond) + " rows/s", "input-rate", "inputRowsPerSecond"],
    ["processed", formatRate(m.processedRowsPerSecond) + " rows/s", "processed-rate",
     "processedRowsPerSecond"],
    ["batch duration", formatMs(m.batchDurationMs), "batch-duration", "batchDurationMs"],
    ["latency", formatMs(m.latencyMs), "latency", "latencyMs"],
    ["state rows", m.stateRows === null || m.stateRows === undefined ? "–" : fmt(m.stateRows),
     "state-rows", "stateRows"],
    ["watermark", formatWatermark(m.eventTimeWatermark), "watermark", null],
    ["last micro-batch", m.lastMicroBatchTimestamp
      ? new Date(m.lastMicroBatchTimestamp).toLocaleTimeString() : "–", "last-batch", null],
  ];
  for (const [k, v, id, series] of items) {
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = k;
    dd.textContent = v;
    dd.dataset.testid = id;
    div.append(dt, dd);
    const spark = series && sparkSvg(h, h && h[series], `spark-${id}`, k,
      series.endsWith("Ms") ? formatMs : series.endsWith("Second") ? formatRate : fmt);
    if (spark) div.appendChild(spark);
    dl.appendChild(div);
  }
  state.metrics = m;
  renderVertexMetrics();
  for (const [vertex, el] of state.expectNodes) renderExpectationNode(vertex, el);
  if (state.vertex) {
    renderExpectationChooser();
    renderExpectationTable();
  }
  const bounded = new Set(((state.detail && state.detail.vertices) || [])
    .filter((d) => d.bounded).map((d) => d.name));
  for (const [vertex, text] of state.metricNodes) {
    let v = m.vertices[vertex];
    // A bounded vertex is listed for its expectations only: no micro-batch counts its rows.
    if (v && bounded.has(vertex) && !v.rowsTotal) v = undefined;
    text.textContent = v
      ? `${v.rowsLastMicroBatch.toLocaleString("en-US")} rows · ${formatRate(v.rowsPerSecond)}/s`
      : "";
    const title = text.parentNode.querySelector("title.metrics-title");
    if (title) {
      title.textContent = v ? `${vertex}: ${v.rowsLastMicroBatch} rows in the last ` +
        `micro-batch, ${formatRate(v.rowsPerSecond)} rows/s, ${v.rowsTotal} rows in all` : "";
    }
    const spark = state.sparkNodes.get(vertex);
    const vh = h && h.vertices && h.vertices[vertex];
    if (spark) {
      if (v && vh) {
        drawSpark(spark, h.timestamps, vh.rowsPerSecond, NODE_W - 16, 10);
        svg("title", {}, spark).textContent = sparkTitle(h, vh.rowsPerSecond, "rows/s");
      } else {
        spark.textContent = "";
        spark.setAttribute("data-points", "0");
      }
    }
  }
}

// The selected vertex's live metrics, each with its last minutes.
const VERTEX_FIGURES = [
  ["rowsTotal", "rows since the start", fmt],
  ["rowsPerSecond", "rows/s (input)", (x) => formatRate(x) + " rows/s"],
  ["processedRowsPerSecond", "rows/s (processed)", (x) => formatRate(x) + " rows/s"],
  ["batchDurationMs", "batch duration", formatMs],
  ["latencyMs", "latency", formatMs],
  ["eventTimeWatermark", "event-time watermark", formatWatermark],
  ["stateRows", "rows in state", fmt],
];

function renderVertexMetrics() {
  const table = $("vertex-metrics");
  const body = table.querySelector("tbody");
  body.textContent = "";
  const m = state.metrics;
  const v = state.vertex && m && m.vertices && m.vertices[state.vertex];
  table.hidden = !v;
  if (!v) return;
  const h = m.history || null;
  const vh = h && h.vertices && h.vertices[state.vertex];
  for (const [key, label, format] of VERTEX_FIGURES) {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    const td = document.createElement("td");
    const chart = document.createElement("td");
    th.textContent = label;
    const value = v[key];
    td.textContent = value === null || value === undefined ? "–" : format(value);
    td.dataset.testid = `vertex-metric-${key}`;
    const spark = sparkSvg(h, vh && vh[key], `vertex-spark-detail-${key}`, label, format);
    if (spark) chart.appendChild(spark);
    tr.append(th, td, chart);
    body.appendChild(tr);
  }
}

// ------------------------------------------------------------------ expectations
function fmt(n) { return Number(n).toLocaleString("en-US"); }

// The expectations of `vertex` in the latest metrics: [[name, counts], ...] in declaration
// order (the driver lists every expectation a vertex declares, before its first micro-batch
// too).
function expectationsOf(vertex) {
  const v = state.metrics && state.metrics.vertices && state.metrics.vertices[vertex];
  return v && v.expectations ? Object.entries(v.expectations) : [];
}

// The graph node's line: failures in the last micro-batch over all its expectations; the
// tooltip has each expectation's counts.
function renderExpectationNode(vertex, el) {
  const list = expectationsOf(vertex);
  if (!list.length) {
    clearExpectationNode(el);
    return;
  }
  const failed = list.reduce((sum, [, c]) => sum + c.failedLastMicroBatch, 0);
  const n = list.length;
  el.label.textContent = failed
    ? `✗ ${fmt(failed)} failed · ${n} exp.` : `✓ ${n} expectation${n === 1 ? "" : "s"} passed`;
  el.text.classList.toggle("failing", failed > 0);
  el.title.textContent = list.map(([name, c]) => `${name} (${c.action}): ` +
    `${fmt(c.failedLastMicroBatch)} failed, ${fmt(c.passedLastMicroBatch)} passed in the ` +
    `last micro-batch; ${fmt(c.failedTotal)} failed, ${fmt(c.passedTotal)} passed in all`)
    .join("\n");
}

function clearExpectationNode(el) {
  el.label.textContent = "";
  el.title.textContent = "";
  el.text.classList.remove("failing");
}

// The selected vertex's expectations as a table (counts per expectation).
function renderExpectationTable() {
  const table = $("expectations");
  const body = table.querySelector("tbody");
  body.textContent = "";
  const list = expectationsOf(state.vertex);
  table.hidden = !list.length;
  for (const [name, c] of list) {
    const tr = document.createElement("tr");
    tr.dataset.testid = "expectation-row";
    tr.dataset.expectation = name;
    const cells = [name, c.action, fmt(c.failedLastMicroBatch), fmt(c.passedLastMicroBatch),
                   fmt(c.failedTotal), fmt(c.passedTotal)];
    cells.forEach((value, i) => {
      const td = document.createElement("td");
      td.textContent = value;
      if ((i === 2 && c.failedLastMicroBatch) || (i === 4 && c.failedTotal)) td.className = "bad";
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
}

// The violations view's chooser: every expectation the vertex declares (from the metrics),
// or all of them; the choice survives refreshes.
function renderExpectationChooser() {
  const select = $("expectation-select");
  const violations = state.request.kind === "violations";
  select.hidden = !violations;
  $("expectation-label").hidden = !violations;
  const names = expectationsOf(state.vertex).map(([name]) => name);
  const wanted = ["", ...names];
  const have = [...select.options].map((o) => o.value);
  if (have.join("\n") !== wanted.join("\n")) {
    select.textContent = "";
    for (const value of wanted) {
      const opt = document.createElement("option");
      opt.value = value;
      opt.textContent = value || "all expectations";
      select.appendChild(opt);
    }
  }
  select.value = wanted.includes(state.request.expectation) ? state.request.expectation : "";
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
  state.metricNodes = new Map();
  state.expectNodes = new Map();
  state.sparkNodes = new Map();
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

  const labels = []; // drawn after the nodes, so that no node covers them
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
      labels.push([mx, (y1 + y2) / 2 - 5, `edge-label-${e.from}-${e.to}`]);
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
    const metrics = svg("text", { x: 8, y: 57, class: "metrics",
                                  "data-testid": `vertex-metrics-${v.name}` }, node);
    state.metricNodes.set(v.name, metrics);
    const expect = svg("text", { x: 8, y: 70, class: "expect",
                                 "data-testid": `vertex-expectations-${v.name}` }, node);
    // The vertex's rows/s over the last minutes (from the metrics' history).
    state.sparkNodes.set(v.name, svg("g", { class: "spark-node", transform: "translate(8,76)",
                                            "data-testid": `vertex-spark-${v.name}` }, node));
    // The line's text in a tspan, so that updating it keeps the tooltip (a child title).
    state.expectNodes.set(v.name, {
      text: expect,
      label: svg("tspan", {}, expect),
      title: svg("title", {}, expect),
    });
    const tip = [v.name, `kind: ${v.kind}`];
    if (badges.length) tip.push(`attributes: ${badges.join(", ")}`);
    if (v.plan && v.plan.inheritedFrom) tip.push(`inherited from ${v.plan.inheritedFrom}`);
    for (const n of (v.plan && v.plan.notes) || []) tip.push(n);
    svg("title", {}, node).textContent = tip.join("\n");
    svg("title", { class: "metrics-title" }, metrics);
    if (v.kind !== "sink") node.addEventListener("click", () => selectVertex(v.name));
  }
  for (const [x, y, testid] of labels) {
    svg("text", { x, y, "text-anchor": "middle", class: "edge-label", "data-testid": testid },
        g).textContent = "blocking";
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
  state.sort = null;
  state.page = 0;
  state.request = { kind: "output", filter: "", expectation: "" };
  $("filter").value = "";
  $("request-form").hidden = false;
  renderRequestForm();
  renderExpectationTable();
  renderVertexMetrics();
  document.querySelectorAll("#graph .node").forEach((n) =>
    n.classList.toggle("selected", n.dataset.vertex === name));
  $("vertex-name").textContent = name;
  renderResult();
  poll();
  state.timer = setInterval(poll, POLL_MS);
}

// The data-sample URL of the selected vertex with the current request.
function sampleUrl() {
  const [ns, app] = state.app.split("/");
  return `/api/v1/namespaces/${encodeURIComponent(ns)}/applications/` +
    `${encodeURIComponent(app)}/vertices/${encodeURIComponent(state.vertex)}/data-sample` +
    requestQuery(state.request);
}

async function poll() {
  if (!state.vertex || !state.app) return;
  const url = sampleUrl();
  // One request per URL at a time; a changed request (another URL) does not wait for it.
  if (state.inflight === url) return;
  state.inflight = url;
  // The ETag of the result on screen: an unchanged result costs a bodiless 304, no re-render.
  const held = state.result && state.resultUrl === url ? state.resultTag : null;
  try {
    const answer = await apiConditional(url, held);
    if (!state.vertex || url !== sampleUrl()) return; // the user moved on meanwhile
    $("poll-info").textContent = "updated " + new Date().toLocaleTimeString() +
      ` · polling every ${POLL_MS / 1000} s`;
    if (answer === null) return; // 304: what is shown is current
    state.result = answer.body;
    state.resultUrl = url;
    state.resultTag = answer.etag;
    renderResult();
  } catch (err) {
    if (!state.vertex || url !== sampleUrl()) return;
    state.result = null;
    state.resultTag = null;
    renderResult();
    setMessage($("status-message"), explain(err), "error");
    // 422: the filter (or expectation) does not fit the vertex; asking again every 3 s
    // would get the same answer, so polling waits until the user changes the request.
    if (err.status === 422) stopPolling();
  } finally {
    if (state.inflight === url) state.inflight = null;
  }
}

// The query string of a round request ("" for the plain round).
function requestQuery(r) {
  const q = new URLSearchParams();
  if (r.kind !== "output") q.set("kind", r.kind);
  if (r.kind === "violations" && r.expectation) q.set("expectation", r.expectation);
  if (r.filter) q.set("filter", r.filter);
  const text = q.toString();
  return text ? "?" + text : "";
}

function renderRequestForm() {
  document.querySelectorAll("#request-form [data-kind]").forEach((b) =>
    b.classList.toggle("on", b.dataset.kind === state.request.kind));
  renderExpectationChooser();
}

// Ask again with a changed request: the records on screen belong to the old one.
function changeRequest(changes) {
  if (!state.vertex) return;
  Object.assign(state.request, changes);
  renderRequestForm();
  stopPolling();
  state.result = null;
  state.resultTag = null;
  state.resultUrl = null;
  state.sort = null;
  state.page = 0;
  renderResult();
  poll();
  state.timer = setInterval(poll, POLL_MS);
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

// ------------------------------------------------------------------ lossless JSON
// A record keeps every digit: a number that a double cannot hold (a bigint beyond 2^53, a
// long decimal, a timestamp in nanoseconds) is read as an ExactNumber with its text, which
// the grid, the raw view and the exports write as it came. JSON.parse hands a reviver each
// number's source text where the browser supports it (Chromium, Firefox); elsewhere a small
// parser reads the records that have a long number.
class ExactNumber {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
}

// The significant digits of a number's text: "-0012.3400e5" -> "1234".
function significant(text) {
  return text.replace(/[eE].*/, "").replace(/[-.]/g, "").replace(/^0+|0+$/g, "");
}

// `value` (the double JSON.parse read from `text`) when it shows every digit of the text in
// its notation ("25.0" shows as 25, "1.0E10" as 1.0E10), else the text as an ExactNumber.
function numberOf(text, value) {
  const shown = String(value);
  if (shown === text) return value;
  const exponent = /[eE]/;
  return significant(shown) === significant(text) &&
    exponent.test(shown) === exponent.test(text) ? value : new ExactNumber(text);
}

const SOURCE_TEXT = (() => {
  let source = null;
  try {
    JSON.parse("[1]", (key, value, context) => {
      if (key === "0") source = context && context.source;
      return value;
    });
  } catch (e) { /* no reviver context */ }
  return source === "1";
})();

function reviveExact(key, value, context) {
  return typeof value === "number" ? numberOf(context.source, value) : value;
}

// A record's JSON text as values; throws when it is not JSON (like JSON.parse).
function parseRecord(text) {
  if (SOURCE_TEXT) return JSON.parse(text, reviveExact);
  const value = JSON.parse(text);
  // A double shows every number of up to 15 significant digits as written, unless it is
  // written with an exponent or String() gives it one (below 1e-6, from 1e21 on): only a
  // text with one of these needs the lossless parser.
  return /\d[\d.]{15}|[eE][+-]?\d|0\.0{5}/.test(text) ? parseLossless(text) : value;
}

// Reads a JSON text that JSON.parse accepted, as JSON.parse does, numbers through numberOf.
function parseLossless(text) {
  const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
  const WORDS = [["true", true], ["false", false], ["null", null]];
  let i = 0;
  const skip = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };
  const string = () => {
    const start = i++;
    while (text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    return JSON.parse(text.slice(start, ++i));
  };
  const value = () => {
    skip();
    const c = text[i];
    if (c === "{") {
      const o = {};
      i++; skip();
      if (text[i] === "}") { i++; return o; }
      for (;;) {
        skip();
        const key = string();
        skip(); i++; // the colon
        // defineProperty: a key "__proto__" is a field, as in JSON.parse.
        Object.defineProperty(o, key, { value: value(), enumerable: true, writable: true,
                                        configurable: true });
        skip();
        if (text[i++] === "}") return o; // else a comma
      }
    }
    if (c === "[") {
      const a = [];
      i++; skip();
      if (text[i] === "]") { i++; return a; }
      for (;;) {
        a.push(value());
        skip();
        if (text[i++] === "]") return a; // else a comma
      }
    }
    if (c === '"') return string();
    for (const [word, v] of WORDS) {
      if (text.startsWith(word, i)) { i += word.length; return v; }
    }
    NUMBER.lastIndex = i;
    const number = NUMBER.exec(text)[0];
    i += number.length;
    return numberOf(number, Number(number));
  };
  return value();
}

// The JSON text of a parsed value, an ExactNumber as its text: compact, or indented by
// `step` as JSON.stringify(v, null, step) does.
function toJson(v, step = "", indent = "") {
  if (v instanceof ExactNumber) return v.text;
  if (!isObject(v)) return JSON.stringify(v);
  const inner = indent + step;
  const items = Array.isArray(v) ? v.map((x) => toJson(x, step, inner))
    : Object.keys(v).map((k) => JSON.stringify(k) + (step ? ": " : ":") +
                                toJson(v[k], step, inner));
  const [open, close] = Array.isArray(v) ? ["[", "]"] : ["{", "}"];
  if (!items.length || !step) return open + items.join(",") + close;
  return `${open}\n${inner}${items.join(",\n" + inner)}\n${indent}${close}`;
}

// A sort key of an ExactNumber: integers exact (a BigInt compares with doubles exactly),
// decimals as the nearest double (ties keep the time order).
function exactKey(v) {
  return /^-?\d+$/.test(v.text) ? BigInt(v.text) : Number(v.text);
}

// ------------------------------------------------------------------ the records grid
// Top-level field names of a Spark type string "struct<a:int,b:struct<c:string>>".
function structFields(type) {
  if (!type || !type.startsWith("struct<") || !type.endsWith(">")) return [];
  const body = type.slice(7, -1);
  const names = [];
  let depth = 0, start = 0, quoted = false;
  for (let i = 0; i <= body.length; i++) {
    const c = body[i];
    if (c === "`") quoted = !quoted;
    else if (!quoted && (c === "<" || c === "(")) depth++;
    else if (!quoted && (c === ">" || c === ")")) depth--;
    if (i === body.length || (!quoted && depth === 0 && c === ",")) {
      const part = body.slice(start, i);
      let name = part;
      if (part.startsWith("`")) {
        const end = part.indexOf("`:", 1);
        name = end > 0 ? part.slice(1, end).replaceAll("``", "`") : part;
      } else if (part.includes(":")) {
        name = part.slice(0, part.indexOf(":"));
      }
      if (name) names.push(name);
      start = i + 1;
    }
  }
  return names;
}

function isObject(v) {
  return v !== null && typeof v === "object" && !(v instanceof ExactNumber);
}

// The rows of a result: every record parsed once (losslessly), kept with its raw text.
function loadRecords(r) {
  const rows = [];
  for (const s of (r && r.samples) || []) {
    for (const rec of s.records) {
      let parsed, ok = true;
      try { parsed = parseRecord(rec.data); } catch (e) { ok = false; }
      rows.push({ sub: s.subtaskIndex, ts: rec.sampleTimestamp, rec, raw: rec.data,
                  parsed, ok, object: ok && isObject(parsed) && !Array.isArray(parsed),
                  lower: null, keys: new Map() });
    }
  }
  rows.sort((a, b) => a.ts - b.ts);
  rows.forEach((row, i) => { row.id = i; });
  const columns = [];
  const seen = new Set();
  const add = (name) => {
    if (!seen.has(name) && columns.length < MAX_COLUMNS) { seen.add(name); columns.push(name); }
  };
  const types = new Set(rows.map((row) => row.rec.dataType));
  // A violations or errors round labels its records: the label comes first.
  if (rows.some((row) => row.rec.expectations)) add("@expectations");
  if (rows.some((row) => row.rec.error)) add("@error");
  for (const t of types) structFields(t).forEach(add);
  for (const row of rows) if (row.object) Object.keys(row.parsed).forEach(add);
  if (rows.some((row) => row.ok && !row.object)) add("value"); // scalars or arrays
  state.rows = rows;
  state.columns = columns;
  state.open = new Set();
  $("record-type").textContent = types.size ? "type: " + [...types].join(" | ") : "";
  $("record-type").title = $("record-type").textContent;
}

function fieldValue(row, column) {
  if (column === "@time") return row.ts;
  if (column === "@subtask") return row.sub;
  if (column === "@expectations") {
    return row.rec.expectations ? row.rec.expectations.join(", ") : undefined;
  }
  if (column === "@error") return row.rec.error === undefined ? undefined : row.rec.error;
  if (!row.ok) return undefined;
  if (row.object) return Object.prototype.hasOwnProperty.call(row.parsed, column)
    ? row.parsed[column] : undefined;
  return column === "value" ? row.parsed : undefined;
}

function compactJson(v) {
  const text = toJson(v);
  return text.length > COMPACT_CHARS ? text.slice(0, COMPACT_CHARS - 1) + "…" : text;
}

// A sort key per (row, column), computed once: [rank, value]. Numbers before strings before
// booleans before nested values; missing and null last in either direction.
function sortKey(row, column) {
  let k = row.keys.get(column);
  if (k) return k;
  const v = fieldValue(row, column);
  if (v === undefined || v === null) k = [9, 0];
  else if (typeof v === "number") k = [0, v];
  else if (v instanceof ExactNumber) k = [0, exactKey(v)];
  else if (typeof v === "string") k = [1, v];
  else if (typeof v === "boolean") k = [2, v ? 1 : 0];
  else k = [3, toJson(v)];
  row.keys.set(column, k);
  return k;
}

function compareRows(a, b, column, dir) {
  const ka = sortKey(a, column), kb = sortKey(b, column);
  if (ka[0] !== kb[0]) return (ka[0] === 9 || kb[0] === 9) ? ka[0] - kb[0] : dir * (ka[0] - kb[0]);
  if (ka[0] === 9) return a.id - b.id;
  if (ka[1] < kb[1]) return -dir;
  if (ka[1] > kb[1]) return dir;
  return a.id - b.id; // stable: ties keep the time order
}

// The shown records: the subtask filter, the search, the sort (all in memory).
function computeView() {
  const q = state.search.trim().toLowerCase();
  let view = state.rows.filter(
    (row) => state.subtask === "all" || String(row.sub) === state.subtask);
  if (q) {
    view = view.filter((row) => {
      if (row.lower === null) row.lower = row.raw.toLowerCase();
      return row.lower.includes(q);
    });
  }
  if (state.sort) {
    const { column, dir } = state.sort;
    view = view.slice().sort((a, b) => compareRows(a, b, column, dir));
  }
  state.view = view;
  const pages = Math.max(1, Math.ceil(view.length / PAGE_ROWS));
  state.page = Math.min(state.page, pages - 1);
}

function headerCell(label, column, sortable) {
  const th = document.createElement("th");
  th.textContent = label;
  if (sortable) {
    th.className = "sortable";
    th.tabIndex = 0; // sortable from the keyboard too (Enter or Space)
    th.dataset.column = column;
    th.dataset.testid = "col-" + column;
    th.title = "sort by " + label;
    if (state.sort && state.sort.column === column) {
      const arrow = document.createElement("span");
      arrow.className = "arrow";
      arrow.textContent = state.sort.dir > 0 ? "▲" : "▼";
      th.appendChild(arrow);
      th.setAttribute("aria-sort", state.sort.dir > 0 ? "ascending" : "descending");
    }
  }
  return th;
}

function valueCell(v) {
  const td = document.createElement("td");
  if (v === undefined) {
    td.className = "missing";
    td.textContent = "–";
  } else if (v === null) {
    td.className = "null";
    td.textContent = "null";
  } else if (isObject(v)) {
    // Nested: compact on one line, the whole value one click away.
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = compactJson(v);
    const pre = document.createElement("pre");
    pre.textContent = toJson(v, "  ");
    details.append(summary, pre);
    td.appendChild(details);
  } else if (typeof v === "string" && v.length > COMPACT_CHARS) {
    const details = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = v.slice(0, COMPACT_CHARS - 1) + "…";
    const pre = document.createElement("pre");
    pre.textContent = v;
    details.append(summary, pre);
    td.appendChild(details);
  } else {
    td.textContent = String(v);
    if (typeof v === "number" || v instanceof ExactNumber) td.className = "num";
  }
  return td;
}

function recordJson(row) {
  return row.ok ? toJson(row.parsed, "  ") : row.raw;
}

function truncatedMark() {
  const mark = document.createElement("span");
  mark.className = "badge truncated";
  mark.dataset.testid = "truncated-marker";
  mark.textContent = "✂ truncated";
  mark.title = "cut to max-record-length: the text is not the whole record";
  return mark;
}

function renderRecords() {
  const started = performance.now();
  computeView();
  const table = $("records");
  const head = table.querySelector("thead");
  const body = table.querySelector("tbody");
  head.textContent = "";
  body.textContent = "";
  const total = state.rows.length;
  $("records-bar").hidden = !total;
  table.hidden = !total;
  $("pager").hidden = state.view.length <= PAGE_ROWS;
  $("view-grid").classList.toggle("on", !state.json);
  $("view-json").classList.toggle("on", state.json);
  const n = (x) => x.toLocaleString("en-US");
  $("match-count").textContent = !total ? "" : state.view.length === total
    ? `${n(total)} record${total === 1 ? "" : "s"}`
    : `${n(state.view.length)} of ${n(total)} record${total === 1 ? "" : "s"}`;
  if (!total) return;

  const hr = document.createElement("tr");
  hr.append(headerCell("Time", "@time", true), headerCell("Subtask", "@subtask", true));
  if (state.json) hr.appendChild(headerCell("Record", "", false));
  else for (const c of state.columns) hr.appendChild(headerCell(LABEL_COLUMNS[c] || c, c, true));
  hr.appendChild(headerCell("", "", false));
  head.appendChild(hr);
  const span = hr.children.length;

  const first = state.page * PAGE_ROWS;
  const shown = state.view.slice(first, first + PAGE_ROWS);
  const frag = document.createDocumentFragment();
  for (const row of shown) {
    const tr = document.createElement("tr");
    tr.dataset.testid = "record";
    tr.dataset.row = String(row.id);
    if (row.rec.truncated) tr.classList.add("truncated");
    const time = document.createElement("td");
    time.className = "time";
    time.textContent = formatTime(row.ts);
    if (row.rec.truncated) { time.append(" "); time.appendChild(truncatedMark()); }
    const sub = document.createElement("td");
    sub.textContent = "#" + row.sub;
    tr.append(time, sub);
    if (state.json) {
      const td = document.createElement("td");
      const pre = document.createElement("pre");
      pre.dataset.testid = "record-data";
      pre.textContent = recordJson(row);
      td.appendChild(pre);
      tr.appendChild(td);
    } else if (!row.ok || (!row.object && !state.columns.includes("value"))) {
      // Not JSON (a record cut by max-record-length): its text across the field columns.
      const td = document.createElement("td");
      td.className = "raw";
      td.colSpan = Math.max(1, state.columns.length);
      td.textContent = row.raw;
      tr.appendChild(td);
    } else {
      for (const c of state.columns) {
        const td = valueCell(fieldValue(row, c));
        if (LABEL_COLUMNS[c]) td.classList.add("label-cell");
        tr.appendChild(td);
      }
    }
    const actions = document.createElement("td");
    actions.className = "actions";
    if (!state.json) {
      const toggle = document.createElement("button");
      toggle.type = "button";
      toggle.className = "plain";
      toggle.textContent = "{ }";
      toggle.title = "show this record's JSON";
      toggle.dataset.action = "raw";
      toggle.dataset.testid = "raw-toggle";
      actions.appendChild(toggle);
    }
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "plain";
    copy.textContent = "Copy";
    copy.title = "copy this record's JSON";
    copy.dataset.action = "copy";
    copy.dataset.testid = "copy-record";
    actions.appendChild(copy);
    tr.appendChild(actions);
    frag.appendChild(tr);
    if (!state.json && state.open.has(row.id)) frag.appendChild(detailRow(row, span));
  }
  body.appendChild(frag);
  const last = Math.min(first + PAGE_ROWS, state.view.length);
  $("page-info").textContent = `${(first + 1).toLocaleString("en-US")}–` +
    `${last.toLocaleString("en-US")} of ${state.view.length.toLocaleString("en-US")}`;
  $("page-prev").disabled = state.page === 0;
  $("page-next").disabled = last >= state.view.length;
  table.dataset.renderMs = (performance.now() - started).toFixed(1);
}

function detailRow(row, span) {
  const tr = document.createElement("tr");
  tr.className = "detail";
  tr.dataset.testid = "record-detail";
  const td = document.createElement("td");
  td.colSpan = span;
  const pre = document.createElement("pre");
  pre.dataset.testid = "record-data";
  pre.textContent = recordJson(row);
  td.appendChild(pre);
  tr.appendChild(td);
  return tr;
}

function rowById(id) { return state.rows[Number(id)]; }

function onGridClick(ev) {
  const th = ev.target.closest("th.sortable");
  if (th) {
    const column = th.dataset.column;
    const dir = state.sort && state.sort.column === column ? -state.sort.dir : 1;
    state.sort = { column, dir };
    state.page = 0;
    renderRecords();
    return;
  }
  const button = ev.target.closest("button[data-action]");
  if (!button) return;
  const row = rowById(button.closest("tr").dataset.row);
  if (!row) return;
  if (button.dataset.action === "raw") {
    if (state.open.has(row.id)) state.open.delete(row.id); else state.open.add(row.id);
    renderRecords();
  } else if (button.dataset.action === "copy") {
    copyText(recordJson(row));
  }
}

async function copyText(text) {
  const note = $("copy-message");
  try {
    await navigator.clipboard.writeText(text);
    note.textContent = "Record copied to the clipboard.";
  } catch (e) {
    // No clipboard API (a page not served over https or localhost): select it for Ctrl+C.
    const area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand && document.execCommand("copy");
    area.remove();
    note.textContent = ok ? "Record copied to the clipboard."
      : "The browser refused the clipboard: open the record's { } view and copy it from there.";
  }
}

// ------------------------------------------------------------------ export
// JSON Lines: one record per line as it was sampled (compact JSON); a record cut by
// max-record-length is not JSON any more and is written as a JSON string of its text.
function toJsonLines(rows) {
  return rows.map((row) => (row.ok ? toJson(row.parsed) : JSON.stringify(row.raw)))
    .join("\n") + (rows.length ? "\n" : "");
}

function csvCell(v) {
  if (v === undefined || v === null) return "";
  let text = isObject(v) ? toJson(v) : String(v);
  // A cell starting with = + - @ would run as a formula in a spreadsheet (CSV injection).
  if (typeof v === "string" && /^[=+\-@\t\r]/.test(text)) text = "'" + text;
  return /[",\r\n]/.test(text) ? '"' + text.replaceAll('"', '""') + '"' : text;
}

// CSV (RFC 4180): time (UTC ISO), subtask, truncated, then one column per field; nested
// values as compact JSON; a cut record's text in the column "raw".
function toCsv(rows) {
  const anyRaw = rows.some((row) => !row.ok);
  const header = ["sampleTime", "subtask", "truncated", ...state.columns];
  if (anyRaw) header.push("raw");
  const lines = [header.map(csvCell).join(",")];
  for (const row of rows) {
    const cells = [new Date(row.ts).toISOString(), row.sub, row.rec.truncated ? "true" : "false",
                   ...state.columns.map((c) => fieldValue(row, c))];
    if (anyRaw) cells.push(row.ok ? undefined : row.raw);
    lines.push(cells.map(csvCell).join(","));
  }
  return lines.join("\r\n") + "\r\n";
}

function exportName(ext) {
  const app = (state.app || "sample").replace("/", "-");
  const round = (state.result && state.result.roundId) || "sample";
  return `${app}-${state.vertex}-${round}.${ext}`.replace(/[^A-Za-z0-9._-]/g, "_");
}

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
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
  // Parse and lay out the records only when the result changed (a poll answers the same
  // result every 3 s; re-rendering would also close what the user expanded).
  const key = r && r.samples ? `${r.roundId}|${r.endTimestamp}|${r.totalRecordCount}` : null;
  if (key !== state.resultKey) {
    state.resultKey = key;
    loadRecords(r);
    renderRecords();
  }
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
  document.querySelectorAll("#request-form [data-kind]").forEach((b) =>
    b.addEventListener("click", () => {
      if (KINDS.includes(b.dataset.kind) && b.dataset.kind !== state.request.kind) {
        changeRequest({ kind: b.dataset.kind, expectation: "" });
      }
    }));
  $("expectation-select").addEventListener("change", (ev) =>
    changeRequest({ expectation: ev.target.value }));
  $("request-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    changeRequest({ filter: $("filter").value.trim() });
  });
  $("filter-clear").addEventListener("click", () => {
    $("filter").value = "";
    if (state.request.filter) changeRequest({ filter: "" });
  });
  $("subtask-select").addEventListener("change", (ev) => {
    state.subtask = ev.target.value;
    state.page = 0;
    renderRecords();
  });
  let searchTimer = null;
  $("search").addEventListener("input", (ev) => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      state.search = ev.target.value;
      state.page = 0;
      renderRecords();
    }, 120);
  });
  $("records").addEventListener("click", onGridClick);
  $("records").addEventListener("keydown", (ev) => {
    if ((ev.key === "Enter" || ev.key === " ") && ev.target.matches("th.sortable")) {
      ev.preventDefault();
      onGridClick(ev);
    }
  });
  $("view-grid").addEventListener("click", () => { state.json = false; renderRecords(); });
  $("view-json").addEventListener("click", () => { state.json = true; renderRecords(); });
  $("page-prev").addEventListener("click", () => { state.page -= 1; renderRecords(); });
  $("page-next").addEventListener("click", () => { state.page += 1; renderRecords(); });
  $("export-jsonl").addEventListener("click", () =>
    download(exportName("jsonl"), toJsonLines(state.view), "application/x-ndjson"));
  $("export-csv").addEventListener("click", () =>
    download(exportName("csv"), toCsv(state.view), "text/csv"));
  if (state.token) loadApplications();
  else setMessage($("app-message"), "Enter a token to start.", "info");
}

document.addEventListener("DOMContentLoaded", init);
