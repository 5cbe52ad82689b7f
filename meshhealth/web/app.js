// meshhealth's live page. Plain JavaScript, no library, no build step: served by the
// agent (--web-listen) with index.html and style.css.
//
// Data: GET /v1/web/status (this agent's status document), GET /v1/web/matrix (every
// observer's row, one character per cell), GET /v1/web/cell (one cell's paths), GET
// /v1/web/events (the findings timeline of the last day: the strip), and the
// WebSocket feed /v1/feed (snapshot, path and round messages), reconnected with back-off
// when the agent goes away. The matrix is drawn on one canvas from an ImageData of one
// pixel per cell, scaled up: a redraw costs the same few milliseconds at 1,000 nodes as
// at 10.
"use strict";

const STATES = {
  R: { name: "reachable", color: "#56b4e9", glyph: "" },
  U: { name: "unreachable", color: "#d55e00", glyph: "✕" },
  P: { name: "suspect", color: "#e69f00", glyph: "!" },
  S: { name: "stale", color: "#8c8c8c", glyph: "/" },
  N: { name: "unassigned", color: "#f7f7f7", glyph: "·" },
  "?": { name: "unknown", color: "#e4e4e4", glyph: "?" },
  X: { name: "other", color: "#cc79a7", glyph: "#" },
};
const CODE_OF = Object.fromEntries(Object.entries(STATES).map(([c, s]) => [s.name, c]));
const PATH_LABELS = {
  "node/icmp": "Host ICMP", "node/http": "Host HTTP",
  "endpoint/icmp": "Endpoint ICMP", "endpoint/http": "Endpoint HTTP",
};
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 5000;

const $ = (id) => document.getElementById(id);
const S = {
  status: null,        // the status document (snapshot + round updates)
  matrix: null,        // the compact matrix
  local: null,         // "cluster/node" of this agent
  localPaths: new Map(), // target key -> {path name -> status}, from the feed
  nodeIPs: new Map(),  // "cluster/node" -> NodeIP (this agent's probe set)
  matrixIPs: new Map(), // "cluster/node" -> NodeIP (every node the agent follows)
  filter: "",
  view: null,          // what is drawn: columns, rows, cell size, offsets
  selected: null,      // {source, target}
  ws: null, retryMs: RETRY_MIN_MS, live: false,
  frames: [],          // render times in ms (the newest 200)
  renders: 0,
  pending: false,
  listDirty: true,     // the node list is rebuilt only when its inputs changed
  matrixFetch: null,
  events: null,        // the findings timeline of the last day (documents/events.py)
};
const EVENTS_REFRESH_MS = 30000;

const key = (n) => `${n.cluster}/${n.name}`;
// A node's NodeIP: from this agent's probe set (its direct targets), else from the
// matrix's columns (every node the agent follows).
const ipOf = (k) => S.nodeIPs.get(k) || S.matrixIPs.get(k) || "";

// Natural order (node2 before node10): the page's copy of meshhealth/naming.py. Runs of
// digits compare by value (without leading zeros: by length, then digit by digit, so
// any length is exact), other runs as text; equal readings fall back to the text.
const DIGIT_RUNS = /(\d+)/;
function naturalCompare(a, b) {
  if (a === b) return 0;
  const pa = a.split(DIGIT_RUNS), pb = b.split(DIGIT_RUNS);
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    let x = pa[i], y = pb[i];
    if (i % 2) {
      x = x.replace(/^0+(?=\d)/, ""); y = y.replace(/^0+(?=\d)/, "");
      if (x.length !== y.length) return x.length < y.length ? -1 : 1;
    }
    if (x !== y) return x < y ? -1 : 1;
  }
  if (pa.length !== pb.length) return pa.length < pb.length ? -1 : 1;
  return a < b ? -1 : 1;
}
// Nodes by cluster, then name, both natural.
const nodeCompare = (a, b) => naturalCompare(a.cluster, b.cluster) || naturalCompare(a.name, b.name);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function fmtDuration(s) {
  if (s === null || s === undefined) return "–";
  if (s < 1e-3) return `${(s * 1e6).toPrecision(3)}µs`;
  if (s < 1) return `${(s * 1e3).toPrecision(3)}ms`;
  return `${s.toPrecision(3)}s`;
}
// How long a finding lasted: `5s`, `2m8s`, `1h2m` (timefmt.format_age's words).
function fmtSpan(s) {
  const t = Math.max(0, Math.round(s));
  if (t < 60) return `${t}s`;
  const m = Math.floor(t / 60);
  return m < 60 ? `${m}m${t % 60}s` : `${Math.floor(m / 60)}h${m % 60}m`;
}
const fmtLoss = (x) => (x === null || x === undefined ? "–" : `${Math.round(x * 100)}%`);
function fmtAgo(iso) {
  if (!iso) return "never";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  return s < 90 ? `${Math.round(s)}s ago` : `${Math.round(s / 60)}min ago`;
}

// --- data ---------------------------------------------------------------------------

async function getJSON(url, timeoutMs = 10000) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeoutMs);
  try {
    const resp = await fetch(url, { signal: ctrl.signal, cache: "no-store" });
    if (resp.status === 401) throw new Error(`${url}: HTTP 401: this page needs its token: open it once as /?token=TOKEN`);
    if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
    return await resp.json();
  } finally {
    clearTimeout(timer);
  }
}

function setStatus(doc) {
  S.status = doc;
  S.local = `${doc.local.cluster}/${doc.local.name}`;
  S.nodeIPs.clear();
  for (const node of doc.nodes || []) {
    S.nodeIPs.set(key(node), node.host?.primary_address?.ip ?? node.node_ip);
    const paths = {};
    for (const [type, part] of [["node", node.host], ["endpoint", node.health_endpoint]]) {
      const addr = part?.primary_address;
      if (!addr) continue;
      for (const proto of ["icmp", "http"]) if (addr[proto]) paths[`${type}/${proto}`] = addr[proto].status;
    }
    if (Object.keys(paths).length) S.localPaths.set(key(node), paths);
  }
}

async function refreshMatrix() {
  if (S.matrixFetch) return S.matrixFetch;
  S.matrixFetch = getJSON("v1/web/matrix")
    .then((m) => { setMatrix(m); renderSummary(); schedule(); })
    .catch((e) => warn(`matrix: ${e.message}`))
    .finally(() => { S.matrixFetch = null; });
  return S.matrixFetch;
}

// Each row's states as bytes (char codes), once per matrix: drawing then reads typed
// arrays only.
function setMatrix(m) {
  // Columns and rows in natural order, whatever order the agent sent (an older agent
  // sorts by text): `order` lists column indices; the rows are sorted in place.
  m.order = m.nodes.map((_, i) => i).sort((a, b) => nodeCompare(m.nodes[a], m.nodes[b]));
  m.inOrder = m.order.every((c, i) => c === i);
  m.rows.sort((a, b) => nodeCompare(m.nodes[a.node], m.nodes[b.node]));
  S.matrixIPs.clear();
  for (const n of m.nodes) if (n.node_ip) S.matrixIPs.set(key(n), n.node_ip);
  for (const row of m.rows) {
    const codes = new Uint8Array(row.states.length);
    for (let i = 0; i < codes.length; i++) codes[i] = row.states.charCodeAt(i);
    row.codes = codes;
  }
  S.matrix = m;
  S.matrixVersion = (S.matrixVersion || 0) + 1;
  S.listDirty = true;
}

// The reachability rule of `meshhealth status`: a failing probed path makes the cell
// unreachable; all probed paths OK, reachable; nothing probed yet, unknown.
function cellFromPaths(paths) {
  let probed = false;
  for (const st of Object.values(paths)) {
    if (st === "unknown" || st === undefined) continue;
    if (st === "suspect") return "P";
    if (st !== "ok") return "U";
    probed = true;
  }
  return probed ? "R" : "?";
}

// --- the live feed ------------------------------------------------------------------

function connect() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/feed`;
  let ws;
  try { ws = new WebSocket(url); } catch (e) { return retry(); }
  S.ws = ws;
  ws.onopen = () => { S.retryMs = RETRY_MIN_MS; setLive(true); refreshMatrix(); };
  ws.onmessage = (ev) => {
    let msg;
    try { msg = JSON.parse(ev.data); } catch (e) { return; }
    if (msg.type === "snapshot") { setStatus(msg.status); S.listDirty = true; renderSummary(); schedule(); }
    else if (msg.type === "path") onPath(msg);
    else if (msg.type === "round") onRound(msg);
  };
  ws.onclose = () => { if (S.ws === ws) { S.ws = null; setLive(false); retry(); } };
  ws.onerror = () => ws.close();
}

function retry() {
  setTimeout(connect, S.retryMs);
  S.retryMs = Math.min(RETRY_MAX_MS, S.retryMs * 2);
}

function setLive(live) {
  S.live = live;
  const el = $("conn");
  el.textContent = live ? "live" : "reconnecting…";
  el.className = `conn ${live ? "conn-up" : "conn-down"}`;
}

// The paths whose state is the cell's; the MTU and L4 paths (icmp-df, udp, tcp:PORT)
// are no outage (`meshhealth status` leaves them out of reachability too).
const REACHABILITY_PROTOCOLS = new Set(["icmp", "http"]);

function onPath(msg) {
  if (!REACHABILITY_PROTOCOLS.has(msg.protocol)) return;
  const k = `${msg.cluster}/${msg.node}`;
  const paths = S.localPaths.get(k) || {};
  paths[`${msg.target_type}/${msg.protocol}`] = msg.path.status;
  S.localPaths.set(k, paths);
  if (msg.changed && msg.changed.includes("status")) schedule();
}

function onRound(msg) {
  if (S.status) {
    for (const f of ["generated_at", "probe_time", "probe_interval_s", "etcd", "round", "summary",
                     "cluster_health", "findings"]) {
      S.status[f] = msg[f];
    }
    for (const n of msg.nodes) S.nodeIPs.set(key(n), n.node_ip);
    S.status.nodes = msg.nodes.map((n) => ({ ...n, host: { primary_address: { ip: n.node_ip } } }));
    S.listDirty = true;
  }
  renderSummary();
  refreshMatrix();
  if (S.selected && S.selected.source === S.local) openCell(S.selected.source, S.selected.target, true);
}

// --- summary, findings, legend --------------------------------------------------------

function renderSummary() {
  const st = S.status;
  if (!st) return;
  $("local").textContent = `${S.local} · interval ${st.probe_interval_s}s`;
  // The cluster's verdict from its aggregator's summary (every observer); before there
  // is one, this node's own probes, said as such (under subset probing: its direct
  // targets, not the cluster).
  const verdict = (st.cluster_health || []).find((v) => v.source === "summary" && v.cluster === st.local?.cluster);
  const plan = st.probe_plan;
  const probing = !plan ? "" : plan.subset
    ? `   probing ${plan.targets} of ${plan.nodes} nodes (k=${plan.k}, epoch ${plan.epoch})`
    : `   probing all ${plan.nodes} nodes`;
  if (verdict) {
    const extra = (verdict.unreachable ? `, ${verdict.unreachable} unreachable` : "") +
      (verdict.suspect ? `, ${verdict.suspect} suspect` : "") +
      (verdict.unknown ? `, ${verdict.unknown} unknown` : "") +
      // Nodes in planned maintenance: in no count (documents/maintenance.py headline_suffix).
      (verdict.maintenance ? `, ${verdict.maintenance} in maintenance` : "");
    const low = verdict.observers_min, median = verdict.observers_median;
    const observers = low === null ? ""
      : low === median ? ` (${low} observer${low === 1 ? "" : "s"} each)`
      : ` (${low}+ observers each, median ${median})`;
    // The observers the verdict discounted, in the findings' words (cluster_health.py).
    const discounted = verdict.discounted_text ? `; ${verdict.discounted_text}` : "";
    // A cluster of one node nobody observes: its 0/1 is no verdict (cluster_health.py ALONE_TEXT).
    const counts = verdict.alone
      ? "1 node, no other node to probe or to observe it (a cluster of one)"
      : `${verdict.reachable}/${verdict.total} reachable${observers}${extra}${discounted}`;
    $("health").textContent =
      `Cluster health: ${counts}` +
      `   (aggregator ${verdict.aggregator}, updated ${fmtAgo(verdict.updated_at)})` + probing;
  } else {
    const sm = st.summary || {};
    const extra = sm.suspect ? `, ${sm.suspect} suspect` : "";
    const head = plan && plan.subset ? "Direct targets" : "Cluster health";
    const own = st.cluster_health && !(plan && plan.subset) ? "this node's own probes: no cluster summary yet; " : "";
    $("health").textContent =
      `${head}: ${sm.reachable ?? 0}/${sm.total ?? 0} reachable${extra}` +
      (st.probe_time ? `   (${own}${st.probe_time})` : "") + probing;
  }
  const lines = [];
  for (const f of st.findings || S.matrix?.findings || []) {
    lines.push(typeof f === "string" ? f
      : `${f.kind}: ${(f.nodes || []).join(", ")}` +
        (f.confidence !== undefined ? ` (confidence ${Math.round(f.confidence * 100)}%)` : "") +
        (f.expected ? " (expected: in maintenance)" : "") +
        (f.evidence ? ` — ${f.evidence}` : ""));
  }
  for (const l of S.matrix?.lines || []) lines.push(l);
  // Information (the coverage line while every node has its k observers, each node in
  // planned maintenance: documents/matrix.py): no warning mark.
  const notes = S.matrix?.notes || [];
  $("findings").innerHTML = lines.map((l) => `<li>${esc(l)}</li>`).join("") +
    notes.map((l) => `<li class="note">${esc(l)}</li>`).join("");
  const warns = [];
  // What is wrong with this node, when the cluster's verdict discounts it, comes first.
  for (const v of st.cluster_health || []) if (v.this_node) warns.push(v.this_node);
  if (st.etcd && st.etcd.up === false) warns.push(`etcd unreachable since ${st.etcd.since ?? "?"}: the node list may be stale`);
  for (const u of S.matrix?.unavailable || []) warns.push(`cluster ${u.cluster}: ${u.error}`);
  $("warnings").innerHTML = warns.map((l) => `<li>${esc(l)}</li>`).join("");
}

// --- the findings timeline strip ----------------------------------------------------

async function refreshEvents() {
  try {
    S.events = await getJSON("v1/web/events");
    renderTimeline();
  } catch (e) {
    warn(`findings timeline: ${e.message}`);
  }
}

// One bar per event over the last day: from its opening (or the strip's start) to its
// closing (or now); one lane per finding (kind and nodes), an open one in red, one in
// planned maintenance all along faded. Its text
// goes in through textContent / title only (read from etcd: never markup).
function renderTimeline() {
  const doc = S.events;
  if (!doc) return;
  const start = Date.parse(doc.since), end = Date.parse(doc.generated_at);
  const span = Math.max(1, end - start);
  const lanes = new Map();
  for (const e of doc.events) {
    const lane = `${e.kind} ${e.nodes.join(",")}`;
    if (!lanes.has(lane)) lanes.set(lane, lanes.size);
  }
  const strip = $("timeline");
  strip.replaceChildren();
  strip.style.height = `${Math.max(1, lanes.size) * 1.2 + 0.3}em`;
  for (const e of doc.events) {
    const from = Math.max(start, Date.parse(e.opened_at));
    const to = e.closed_at === null ? end : Math.min(end, Date.parse(e.closed_at));
    const bar = document.createElement("div");
    bar.className = "bar" + (e.closed_at === null ? " open" : "") + (e.expected ? " expected" : "");
    bar.style.left = `${((from - start) / span) * 100}%`;
    bar.style.width = `${(Math.max(0, to - from) / span) * 100}%`;
    bar.style.top = `${lanes.get(`${e.kind} ${e.nodes.join(",")}`) * 1.2 + 0.15}em`;
    bar.title = `${e.kind} ${e.nodes.join(", ")}: ${e.opened_at} → ${e.closed_at ?? "open"}` +
      ` (${fmtSpan(e.duration_s)}, confidence ${Math.round(e.confidence * 100)}%` +
      `${e.expected ? ", expected: in maintenance" : ""}) — ${e.evidence}`;
    bar.dataset.kind = e.kind;
    strip.appendChild(bar);
  }
  const open = doc.events.filter((e) => e.closed_at === null).length;
  $("timeline-count").textContent = `${doc.events.length} finding${doc.events.length === 1 ? "" : "s"}, ${open} open`;
  $("timeline-start").textContent = doc.since;
  $("timeline-section").hidden = doc.events.length === 0;
}

// Why the cluster verdict discounts an observer ("cluster/node"), from the status's
// cluster_health entries (cluster_health.py); undefined when it counts.
function discountedReason(source) {
  for (const v of S.status?.cluster_health || []) {
    for (const d of v.discounted_observers || []) if (d.node === source) return d.reason;
  }
  return undefined;
}

function renderLegend() {
  // Colour, a glyph and the word: readable without telling the colours apart.
  $("legend").innerHTML = Object.values(STATES).filter((s) => s.name !== "other").map((s) =>
    `<li><span class="swatch st-${s.name}">${esc(s.glyph)}</span>${s.name}</li>`,
  ).join("");
}

// --- the matrix ---------------------------------------------------------------------

function schedule() {
  if (S.pending) return;
  S.pending = true;
  requestAnimationFrame(() => { S.pending = false; render(); });
}

function matches(node, filter) {
  if (!filter) return true;
  const k = key(node);
  return k.includes(filter) || ipOf(k).includes(filter);
}

function buildView() {
  const m = S.matrix;
  if (!m) return null;
  const f = S.filter;
  const cols = [];
  for (const i of m.order) if (matches(m.nodes[i], f)) cols.push(i);
  const rows = m.rows.filter((r) => matches(m.nodes[r.node], f));
  const wrap = $("canvas-wrap");
  const avail = Math.max(200, wrap.clientWidth - 8);
  const clusters = new Set(cols.map((i) => m.nodes[i].cluster));
  const longest = Math.max(4, ...cols.slice(0, 2000).map((i) => m.nodes[i].name.length));
  let cell = Math.floor((avail - 40) / Math.max(1, cols.length));
  cell = Math.max(1, Math.min(40, cell));
  const showNames = cell >= 9;
  const label = showNames ? Math.min(170, longest * 7 + 14) : 34;
  const top = label + (clusters.size > 1 ? 16 : 0);
  const left = label + (clusters.size > 1 ? 16 : 0);
  cell = Math.max(1, Math.min(cell, Math.floor((avail - left) / Math.max(1, cols.length))));
  return { cols, rows, cell, top, left, showNames, multi: clusters.size > 1 };
}

function stateAt(row, col) {
  const m = S.matrix;
  const source = key(m.nodes[row.node]);
  if (source === S.local) {
    const paths = S.localPaths.get(key(m.nodes[col]));
    if (paths) return cellFromPaths(paths);
  }
  return row.states[col] || "?";
}

const RGB = Object.fromEntries(Object.entries(STATES).map(([c, s]) => {
  const v = parseInt(s.color.slice(1), 16);
  // ImageData is RGBA bytes; written as little-endian 32-bit words: A B G R.
  return [c, (0xff << 24) | ((v & 0xff) << 16) | (v & 0xff00) | ((v >> 16) & 0xff)];
}));
// Pixel of a state's char code (anything unknown: "other").
const LUT = new Uint32Array(128).fill(RGB.X);
for (const [c, v] of Object.entries(RGB)) LUT[c.charCodeAt(0)] = v;

function render() {
  const t0 = performance.now();
  const v = (S.view = buildView());
  const canvas = $("matrix");
  if (!v) return;
  const m = S.matrix;
  const nc = v.cols.length, nr = v.rows.length;
  const dpr = window.devicePixelRatio || 1;
  const w = v.left + nc * v.cell + 4, h = v.top + nr * v.cell + 4;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    canvas.style.width = `${w}px`; canvas.style.height = `${h}px`;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, w, h);
  if (nc && nr) {
    // One pixel per cell, then scaled without smoothing: cost ~ cells, not ~ pixels.
    // The image is rebuilt when the matrix or the filter changed; otherwise only this
    // agent's own row (the one the feed updates between two matrix reads).
    const off = S.offscreen || (S.offscreen = document.createElement("canvas"));
    const imgKey = `${S.matrixVersion}|${S.filter}`;
    const full = S.imgKey !== imgKey;
    if (full) {
      S.img = new ImageData(nc, nr);
      off.width = nc; off.height = nr;
      S.imgKey = imgKey;
    }
    const img = S.img, px = new Uint32Array(img.data.buffer), offCtx = off.getContext("2d");
    const cols = v.cols, all = m.inOrder && cols.length === m.nodes.length;
    for (let r = 0; r < nr; r++) {
      const row = v.rows[r];
      const base = r * nc;
      if (key(m.nodes[row.node]) === S.local) {
        for (let c = 0; c < nc; c++) px[base + c] = RGB[stateAt(row, cols[c])] ?? RGB.X;
        if (!full) offCtx.putImageData(img, 0, 0, 0, r, nc, 1);
        continue;
      }
      if (!full) continue;
      const codes = row.codes;
      if (all) for (let c = 0; c < nc; c++) px[base + c] = LUT[codes[c] & 127];
      else for (let c = 0; c < nc; c++) px[base + c] = LUT[codes[cols[c]] & 127];
    }
    if (full) offCtx.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, v.left, v.top, nc * v.cell, nr * v.cell);
    if (v.cell >= 12) drawGlyphs(ctx, v);
    if (v.cell >= 6) drawGrid(ctx, v);
  }
  drawAxes(ctx, v);
  drawSelection(ctx, v);
  const ms = performance.now() - t0;
  S.frames.push(ms);
  if (S.frames.length > 200) S.frames.shift();
  S.renders++;
  renderNodeList();
}

function drawGlyphs(ctx, v) {
  ctx.font = `${Math.floor(v.cell * 0.7)}px sans-serif`;
  ctx.textAlign = "center"; ctx.textBaseline = "middle";
  for (let r = 0; r < v.rows.length; r++) {
    for (let c = 0; c < v.cols.length; c++) {
      const code = stateAt(v.rows[r], v.cols[c]);
      const s = STATES[code] || STATES.X;
      if (!s.glyph) continue;
      ctx.fillStyle = code === "U" || code === "S" ? "#fff" : "#000";
      ctx.fillText(s.glyph, v.left + (c + 0.5) * v.cell, v.top + (r + 0.55) * v.cell);
    }
  }
}

function drawGrid(ctx, v) {
  ctx.strokeStyle = "#ffffff"; ctx.lineWidth = 1;
  ctx.beginPath();
  for (let c = 0; c <= v.cols.length; c++) {
    ctx.moveTo(v.left + c * v.cell + 0.5, v.top); ctx.lineTo(v.left + c * v.cell + 0.5, v.top + v.rows.length * v.cell);
  }
  for (let r = 0; r <= v.rows.length; r++) {
    ctx.moveTo(v.left, v.top + r * v.cell + 0.5); ctx.lineTo(v.left + v.cols.length * v.cell, v.top + r * v.cell + 0.5);
  }
  ctx.stroke();
}

// Cluster blocks: a dark line where the cluster changes, its name along the axis.
function clusterRuns(indices, nodeOf) {
  const runs = [];
  indices.forEach((idx, i) => {
    const cl = nodeOf(idx).cluster;
    if (!runs.length || runs[runs.length - 1].cluster !== cl) runs.push({ cluster: cl, start: i, end: i + 1 });
    else runs[runs.length - 1].end = i + 1;
  });
  return runs;
}

function drawAxes(ctx, v) {
  const m = S.matrix;
  const nc = v.cols.length, nr = v.rows.length;
  ctx.fillStyle = "#1b1f24";
  ctx.font = "11px system-ui, sans-serif";
  const step = v.showNames ? 1 : Math.ceil(14 / v.cell);
  // Column names (targets), rotated, and row names (observers).
  ctx.textBaseline = "middle";
  for (let c = 0; c < nc; c += step) {
    const n = m.nodes[v.cols[c]];
    ctx.save();
    ctx.translate(v.left + (c + 0.5) * v.cell, v.top - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(v.showNames ? n.name : String(v.cols[c] + 1), 0, 0);
    ctx.restore();
  }
  ctx.textAlign = "right";
  for (let r = 0; r < nr; r += step) {
    const n = m.nodes[v.rows[r].node];
    // An observer the cluster verdict discounts (its own row explains its failures).
    const mark = discountedReason(key(n)) ? "⊘ " : "";
    const name = mark + (v.showNames ? n.name : String(v.rows[r].node + 1));
    const own = key(n) === S.local;
    ctx.font = own ? "bold 11px system-ui, sans-serif" : "11px system-ui, sans-serif";
    ctx.fillText(name, v.left - 4, v.top + (r + 0.5) * v.cell);
    if (own) {
      // This agent's own row (live from the feed): a dot before its name.
      const width = ctx.measureText(name).width;
      ctx.beginPath();
      ctx.arc(v.left - 10 - width, v.top + (r + 0.5) * v.cell, 3, 0, 2 * Math.PI);
      ctx.fill();
    }
  }
  ctx.font = "11px system-ui, sans-serif";
  if (!v.multi) return;
  ctx.strokeStyle = "#1b1f24"; ctx.lineWidth = 2;
  const colRuns = clusterRuns(v.cols, (i) => m.nodes[i]);
  const rowRuns = clusterRuns(v.rows, (r) => m.nodes[r.node]);
  ctx.beginPath();
  for (const run of colRuns.slice(1)) {
    ctx.moveTo(v.left + run.start * v.cell, v.top); ctx.lineTo(v.left + run.start * v.cell, v.top + nr * v.cell);
  }
  for (const run of rowRuns.slice(1)) {
    ctx.moveTo(v.left, v.top + run.start * v.cell); ctx.lineTo(v.left + nc * v.cell, v.top + run.start * v.cell);
  }
  ctx.stroke();
  ctx.font = "bold 11px system-ui, sans-serif";
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  for (const run of colRuns) ctx.fillText(run.cluster, v.left + ((run.start + run.end) / 2) * v.cell, 2);
  for (const run of rowRuns) {
    ctx.save();
    ctx.translate(2, v.top + ((run.start + run.end) / 2) * v.cell);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(run.cluster, 0, 0);
    ctx.restore();
  }
}

function drawSelection(ctx, v) {
  if (!S.selected) return;
  const m = S.matrix;
  const c = v.cols.findIndex((i) => key(m.nodes[i]) === S.selected.target);
  const r = v.rows.findIndex((row) => key(m.nodes[row.node]) === S.selected.source);
  if (c < 0 || r < 0) return;
  const s = Math.max(v.cell, 3);
  ctx.strokeStyle = "#000"; ctx.lineWidth = 2;
  ctx.strokeRect(v.left + c * v.cell - 1, v.top + r * v.cell - 1, s + 2, s + 2);
}

function cellAt(ev) {
  const v = S.view;
  if (!v) return null;
  const rect = $("matrix").getBoundingClientRect();
  const x = ev.clientX - rect.left - v.left, y = ev.clientY - rect.top - v.top;
  const c = Math.floor(x / v.cell), r = Math.floor(y / v.cell);
  if (x < 0 || y < 0 || c >= v.cols.length || r >= v.rows.length) return null;
  const m = S.matrix;
  const row = v.rows[r];
  return { source: key(m.nodes[row.node]), target: key(m.nodes[v.cols[c]]), code: stateAt(row, v.cols[c]) };
}

// --- one cell's paths ---------------------------------------------------------------

async function openCell(source, target, quiet = false) {
  S.selected = { source, target };
  schedule();
  const q = `v1/web/cell?source=${encodeURIComponent(source)}&target=${encodeURIComponent(target)}`;
  let doc = null, note = "";
  if (source !== S.local && ipOf(source)) {
    // The observer keeps the history of its own paths: ask its agent, same port.
    const ip = ipOf(source);
    const host = ip.includes(":") ? `[${ip}]` : ip;
    try { doc = await getJSON(`${location.protocol}//${host}:${location.port}/${q}`, 2000); }
    catch (e) { note = `${source}'s own page did not answer (${e.message}); shown: what it last published to etcd.`; }
  }
  if (!doc) {
    try { doc = await getJSON(q); } catch (e) { if (!quiet) showDetailError(source, target, e); return; }
    if (!doc.own && !note) note = `shown: what ${source} last published to etcd; its agent keeps percentiles and history.`;
  }
  if (S.selected && S.selected.source === source && S.selected.target === target) showDetail(doc, note);
}

function showDetailError(source, target, e) {
  $("detail").hidden = false;
  $("detail-title").textContent = `${source} → ${target}`;
  $("detail-state").textContent = e.message;
  $("detail-paths").querySelector("tbody").innerHTML = "";
  $("detail-history").innerHTML = "";
}

function showDetail(doc, note) {
  $("detail").hidden = false;
  $("detail-title").textContent = `${doc.source} → ${doc.target}`;
  const code = CODE_OF[doc.state] || "X";
  const reason = discountedReason(doc.source);
  $("detail-state").innerHTML = `<span class="state st-${esc(doc.state)}">${esc(STATES[code].glyph)} ${esc(doc.state)}</span>` +
    (doc.probe_time ? ` <span class="muted">observer's round ${esc(doc.probe_time)}${doc.stale ? " (stale)" : ""}</span>` : "") +
    (reason
      ? ` <span class="discounted">⊘ from a discounted observer (${esc(reason)}): ` +
        "it counts in the cells, not in the node verdict</span>"
      : "");
  $("detail-paths").querySelector("tbody").innerHTML = doc.paths.map((p) => `<tr>
    <td>${esc(PATH_LABELS[p.name] || p.name)}${p.ip ? `<br><span class="muted small">${esc(p.ip)}</span>` : ""}</td>
    <td>${esc(p.text || p.status)}${p.detail ? ` <span class="muted">${esc(p.detail)}</span>` : ""}</td>
    <td class="num">${fmtLoss(p.loss)}</td>
    <td class="num">${fmtDuration(p.rtt_p50_s ?? p.rtt_s)}</td>
    <td class="num">${fmtDuration(p.rtt_p95_s)}</td>
    <td class="num">${fmtDuration(p.rtt_max_s)}</td>
    <td>${p.last_probed !== undefined ? esc(fmtAgo(p.last_probed)) : "–"}</td></tr>`).join("");
  const hist = $("detail-history");
  hist.innerHTML = "";
  for (const p of doc.paths) {
    if (!p.history) continue;
    const row = document.createElement("div");
    row.className = "spark-row";
    row.innerHTML = `<span>${esc(PATH_LABELS[p.name] || p.name)}</span>`;
    row.appendChild(sparkline(p.history, doc.history_minutes));
    hist.appendChild(row);
  }
  if (hist.children.length) {
    const caption = document.createElement("div");
    caption.className = "muted";
    caption.textContent = `last ${doc.history_minutes} min: line = RTT p50 per minute, bars = failed probes`;
    hist.prepend(caption);
  }
  $("detail-note").textContent = note;
}

// One minute per x step: the p50 RTT as a line (log scale), failures as bars from below.
function sparkline(rows, minutes) {
  const W = 240, H = 36;
  const c = document.createElement("canvas");
  const dpr = window.devicePixelRatio || 1;
  c.width = W * dpr; c.height = H * dpr; c.style.width = `${W}px`; c.style.height = `${H}px`;
  c.setAttribute("role", "img");
  const ctx = c.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
  const nowMin = Math.floor(Date.now() / 60000);
  const x = (start) => W - 2 - (nowMin - Math.floor(start / 60)) * ((W - 4) / minutes);
  const rtts = rows.map((r) => r[3]).filter((v) => v !== null && v > 0);
  const lo = Math.log10(Math.min(...rtts, 1e-4)), hi = Math.log10(Math.max(...rtts, 1e-3));
  const y = (v) => H - 3 - ((Math.log10(v) - lo) / Math.max(0.3, hi - lo)) * (H - 8);
  for (const r of rows) {
    if (!r[2]) continue;
    ctx.fillStyle = "#d55e00";
    const bh = Math.max(3, (r[2] / Math.max(1, r[1])) * (H - 4));
    ctx.fillRect(x(r[0]) - 1.5, H - bh, 3, bh);
  }
  ctx.strokeStyle = "#0072b2"; ctx.lineWidth = 1.5;
  ctx.beginPath();
  let started = false;
  for (const r of rows) {
    if (r[3] === null) { started = false; continue; }
    if (started) ctx.lineTo(x(r[0]), y(r[3])); else ctx.moveTo(x(r[0]), y(r[3]));
    started = true;
  }
  ctx.stroke();
  ctx.fillStyle = "#0072b2";
  for (const r of rows) if (r[3] !== null) ctx.fillRect(x(r[0]) - 1.5, y(r[3]) - 1.5, 3, 3);
  const last = rows.length ? rows[rows.length - 1] : null;
  c.setAttribute("aria-label", last ? `RTT p50 ${fmtDuration(last[3])} in the last minute` : "no history yet");
  c.title = rtts.length ? `RTT p50 from ${fmtDuration(Math.min(...rtts))} to ${fmtDuration(Math.max(...rtts))}` : "no successful probe";
  return c;
}

// --- the node list ------------------------------------------------------------------

function renderNodeList() {
  const m = S.matrix;
  if (!m || !S.listDirty) return;
  S.listDirty = false;
  const n = m.nodes.length;
  const reached = new Int32Array(n), fresh = new Int32Array(n);
  for (const row of m.rows) {
    if (row.stale || !row.probe_time) continue;
    for (let c = 0; c < n; c++) {
      const code = row.states.charCodeAt(c);
      if (code === 82 /* R */) { reached[c]++; fresh[c]++; } else if (code === 85 /* U */ || code === 80 /* P */) fresh[c]++;
    }
  }
  const fromHere = new Map();
  for (const node of S.status?.nodes || []) fromHere.set(key(node), node.state);
  const shown = [];
  for (const i of m.order) if (matches(m.nodes[i], S.filter)) shown.push(i);
  $("node-count").textContent = S.filter ? `${shown.length} of ${n}` : `${n}`;
  $("node-table").querySelector("tbody").innerHTML = shown.map((i) => {
    const node = m.nodes[i], k = key(node);
    const here = fromHere.get(k) || "–";
    return `<tr class="${k === S.local ? "local" : ""}" data-node="${esc(k)}"><td title="${esc(k)}">${esc(k)}</td>` +
      `<td>${esc(ipOf(k))}</td><td><span class="state st-${esc(here)}">${esc(here)}</span></td>` +
      `<td>${fresh[i] ? `${reached[i]}/${fresh[i]}` : "–"}</td></tr>`;
  }).join("");
}

// --- wiring -------------------------------------------------------------------------

function warn(text) {
  const li = document.createElement("li");
  li.textContent = text;
  $("warnings").appendChild(li);
}

function init() {
  renderLegend();
  const canvas = $("matrix"), tip = $("tooltip");
  canvas.addEventListener("mousemove", (ev) => {
    const hit = cellAt(ev);
    if (!hit) { tip.hidden = true; return; }
    tip.hidden = false;
    tip.textContent = `${hit.source} → ${hit.target}: ${(STATES[hit.code] || STATES.X).name}`;
    const wrap = $("canvas-wrap").getBoundingClientRect();
    tip.style.left = `${ev.clientX - wrap.left + 14}px`;
    tip.style.top = `${ev.clientY - wrap.top + 10}px`;
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  canvas.addEventListener("click", (ev) => {
    const hit = cellAt(ev);
    if (hit) openCell(hit.source, hit.target);
  });
  $("detail-close").addEventListener("click", () => { S.selected = null; $("detail").hidden = true; schedule(); });
  $("filter").addEventListener("input", (ev) => { S.filter = ev.target.value.trim(); S.listDirty = true; schedule(); });
  window.addEventListener("resize", schedule);
  getJSON("v1/web/status").then((doc) => { setStatus(doc); S.listDirty = true; renderSummary(); schedule(); }).catch((e) => warn(e.message));
  refreshMatrix();
  refreshEvents();
  setInterval(refreshEvents, EVENTS_REFRESH_MS);
  connect();
  // While the feed is down, the matrix is still refreshed (the agent may be back).
  setInterval(() => { if (!S.live) refreshMatrix(); }, 5000);
}

// For tests and the frame-time benchmark (bench/web_frame_time.py).
window.meshhealth = {
  state: S,
  render,
  naturalCompare,
  setMatrix,
  frameTimes: () => S.frames.slice(),
  cellCenter(source, target) {
    const v = S.view, m = S.matrix;
    if (!v) return null;
    const c = v.cols.findIndex((i) => key(m.nodes[i]) === target);
    const r = v.rows.findIndex((row) => key(m.nodes[row.node]) === source);
    if (c < 0 || r < 0) return null;
    return { x: v.left + (c + 0.5) * v.cell, y: v.top + (r + 0.5) * v.cell };
  },
  cellState(source, target) {
    const m = S.matrix;
    if (!m) return null;
    const col = m.nodes.findIndex((n) => key(n) === target);
    const row = m.rows.find((r) => key(m.nodes[r.node]) === source);
    return row && col >= 0 ? (STATES[stateAt(row, col)] || STATES.X).name : null;
  },
};

init();
