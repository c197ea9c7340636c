// Timeshare status page: polls v2/status every second; read-only. No dependencies.
"use strict";
const KEY = "timeshare.key";
const POINTS = 120;  // two minutes of history per plot
const PRIORITIES = ["realtime", "interactive", "batch", "background"];
const history = { swaps: [], queue: [], p99: [], classes: Object.fromEntries(PRIORITIES.map((p) => [p, []])) };
let previous = null;  // {at, swaps, pre, batches, compute} per device, for rates

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
};
const mib = (b) => (b / 1048576).toFixed(2) + " MiB";
const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(0) + "%");
const num = (x, d = 1) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));

function push(series, value) {
  series.push(value);
  if (series.length > POINTS) series.shift();
}

function plot(svg, series, label) {
  const max = Math.max(1e-9, ...series);
  const step = 240 / (POINTS - 1);
  const off = POINTS - series.length;
  const pts = series.map((v, i) => `${((off + i) * step).toFixed(1)},${(58 - (v / max) * 54).toFixed(1)}`);
  svg.replaceChildren();
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts.join(" "));
  svg.append(line);
  const cap = svg.parentElement.querySelector("figcaption");
  cap.replaceChildren(label + " ", el("b", { "data-testid": svg.id + "-now" },
                                    num(series[series.length - 1] ?? 0)));
}

// One line per priority class (the classes with traffic), on a shared scale.
function plotClasses(svg, byClass) {
  const shown = PRIORITIES.filter((p) => byClass[p].some((v) => v > 0));
  const max = Math.max(1e-9, ...shown.flatMap((p) => byClass[p]));
  const step = 240 / (POINTS - 1);
  svg.replaceChildren();
  for (const p of shown) {
    const series = byClass[p];
    const off = POINTS - series.length;
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", series.map((v, i) =>
      `${((off + i) * step).toFixed(1)},${(58 - (v / max) * 54).toFixed(1)}`).join(" "));
    line.setAttribute("class", "class-" + p);
    svg.append(line);
  }
  const cap = svg.parentElement.querySelector("figcaption");
  cap.replaceChildren("p99 by class (ms) ", ...shown.map((p) =>
    el("b", { class: "class-" + p, "data-testid": "plot-class-" + p },
       `${p} ${num(byClass[p][byClass[p].length - 1] ?? 0, 0)} `)));
}

function devices(status, now) {
  const out = [];
  for (const [pool, info] of Object.entries(status.pools || {})) {
    if (info.error) { out.push({ pool, error: info.error }); continue; }
    const d = info.device || {};
    const id = pool + ":" + d.device;
    const swaps = (d.swaps || {}).count || 0;
    const pre = d.preemptions || 0;
    const batches = d.chunks || 0;
    const compute = d.compute_s || 0;
    const before = previous && previous[id];
    const dt = before ? Math.max(1e-3, (now - before.at) / 1000) : 0;
    // the device's forward passes since the last poll: its busy share (above 100 % on a GPU
    // whose streams overlapped), batches per second and their mean forward time
    const ran = before ? Math.max(0, batches - before.batches) : 0;
    const busyS = before ? Math.max(0, compute - before.compute) : 0;
    out.push({ pool, id, d, swaps, pre, batches, compute,
               swapRate: before ? Math.max(0, swaps - before.swaps) / dt : 0,
               preRate: before ? Math.max(0, pre - before.pre) / dt : 0,
               busy: before ? busyS / dt : null, batchRate: before ? ran / dt : null,
               forwardMs: ran ? (1000 * busyS) / ran : null });
  }
  return out;
}

function renderDevices(rows) {
  const box = el("div", { class: "devices" });
  for (const r of rows) {
    if (r.error) { box.append(el("div", { class: "device" }, `${r.pool}: ${r.error}`)); continue; }
    const m = r.d.memory || {};
    const used = m.total_bytes ? m.used_bytes / m.total_bytes : 0;
    const bar = el("div", { class: "bar" }, el("div", { style: `width:${(100 * used).toFixed(1)}%` }));
    const resident = Object.entries(r.d.resident_bytes || {}).sort((a, b) => b[1] - a[1]);
    const chips = el("div", { class: "chips", "data-testid": "resident" },
      ...resident.map(([k, b]) => el("span", {}, `${k} ${(b / 1024).toFixed(0)} KiB`)));
    const host = (r.d.host_tier || []).filter((k) => !(k in (r.d.resident_bytes || {})));
    const queues = PRIORITIES.map((p) => `${p} ${(r.d.queue_depth || {})[p] || 0}`).join(" · ");
    const kv = el("div", { class: "kv" },
      "memory", el("span", {}, `${mib(m.used_bytes || 0)} used of ${mib(m.total_bytes || 0)}` +
                              ` (host tier ${mib(m.host_used_bytes || 0)})`),
      "busy", el("span", { "data-testid": "busy" }, r.busy === null ? "–" :
                 `${num(100 * r.busy, 0)} % · ${num(r.batchRate)} batches/s · forward ` +
                 (r.forwardMs === null ? "–" : `${num(r.forwardMs)} ms`)),
      "swaps", el("span", { "data-testid": "swaps" },
                  `${r.swaps} total · ${num(r.swapRate)}/s · ${mib((r.d.swaps || {}).bytes || 0)} copied`),
      "preemptions", el("span", { "data-testid": "preemptions" }, `${r.pre} total · ${num(r.preRate)}/s`),
      "evictions", el("span", {}, String(r.d.evictions || 0)),
      "queues", el("span", { "data-testid": "queues" }, queues));
    box.append(el("div", { class: "device", "data-device": r.id },
      el("h3", {}, `${r.pool} · ${r.d.device}`), bar, kv,
      el("h4", {}, `resident on the device (${resident.length})`), chips,
      el("h4", {}, `host tier only (${host.length})`),
      el("div", { class: "chips host" }, ...host.map((k) => el("span", {}, k)))));
  }
  $("#devices").replaceChildren(box);
}

function renderModels(status) {
  const breakers = {};
  for (const [key, state] of Object.entries(status.breakers || {})) {
    const [model, pool] = key.split("@");
    (breakers[model] = breakers[model] || []).push(`${pool} ${state}`);
  }
  const names = new Set(Object.keys(status.models || {}));
  for (const info of Object.values(status.pools || {}))
    for (const name of Object.keys(info.models || {})) names.add(name);
  const rows = [...names].sort().map((name) => {
    const s = (status.models || {})[name] || {};
    const b = breakers[name] || [];
    const worst = b.some((x) => x.endsWith("open") && !x.endsWith("half_open")) ? "open"
      : b.some((x) => x.endsWith("half_open")) ? "half_open" : "";
    return el("tr", { "data-model": name }, el("td", {}, name), el("td", {}, num(s.rate_per_s)),
      el("td", {}, num(s.p99_ms)), el("td", {}, pct(s.cache_hit_share)),
      el("td", {}, pct(s.degraded_share)), el("td", { class: worst }, b.join(", ") || "–"));
  });
  $("#models tbody").replaceChildren(...rows);
}

// Every failed or refused model config or version, once even when several pools report it.
function loadProblems(status) {
  const seen = new Map();
  for (const info of Object.values(status.pools || {}))
    for (const [name, m] of Object.entries(info.models || {}))
      for (const [version, v] of [["", m.problem], ...Object.entries(m.versions || {})])
        if (v && (v.state === "failed" || v.state === "refused"))
          seen.set(JSON.stringify([name, version, v.state, v.reason]), { name, version, ...v });
  return [...seen.values()].sort((a, b) => (a.name + a.version).localeCompare(b.name + b.version));
}

function renderProblems(status) {
  const rows = loadProblems(status).map((p) => el("tr", { class: p.state, "data-model": p.name },
    el("td", {}, p.name), el("td", {}, p.version || "config"), el("td", {}, p.state),
    el("td", {}, p.file || "–"), el("td", {}, p.field || "–"), el("td", { class: "reason" }, p.reason || "")));
  $("#problems tbody").replaceChildren(...(rows.length ? rows
    : [el("tr", {}, el("td", { class: "muted", colspan: "6" }, "none"))]));
}

// "p50 / p99" of one class's series on each device (the pool named when there are several).
function waitCell(status, label, series) {
  const cells = [];
  for (const [pool, info] of Object.entries(status.pools || {})) {
    const row = ((((info.device || {}).classes || {}).by_class) || {})[label];
    if (!row) continue;
    const q = row[series + "_ms"] || {};
    cells.push([pool, `${num(q.p50)} / ${num(q.p99)}`]);
  }
  if (cells.length === 1) return cells[0][1];
  return cells.map(([pool, c]) => `${pool} ${c}`).join("; ") || "–";
}

function renderClasses(status) {
  const classes = status.classes || {};
  const byClass = classes.by_class || {};
  $("#classes-window").textContent = classes.window_s === undefined ? ""
    : `(last ${num(classes.window_s, 0)} s)`;
  $("#classes tbody").replaceChildren(...PRIORITIES.map((p) => {
    const r = byClass[p] || {};
    const lat = r.latency_ms || {};
    return el("tr", { "data-class": p }, el("td", {}, p), el("td", {}, num(r.rate_per_s)),
      el("td", {}, num(lat.p50)), el("td", { "data-testid": "p99-" + p }, num(lat.p99)),
      el("td", {}, waitCell(status, p, "queue")), el("td", {}, waitCell(status, p, "compute")),
      el("td", {}, String(r.shed || 0)), el("td", {}, String(r.refused || 0)),
      el("td", {}, String(r.errors || 0)));
  }));
}

function renderAlerts(status) {
  const firing = status.firing_alerts || [];
  $("#alerts").replaceChildren(...(firing.length ? firing.map((a) => el("li", { class: a.severity || "" },
    `${a.alertname} ${a.severity || ""} ` + Object.entries(a).filter(([k]) => !["alertname", "severity"].includes(k))
      .map(([k, v]) => `${k}=${v}`).join(" "))) : [el("li", { class: "muted" }, "none")]));
}

async function poll() {
  const key = sessionStorage.getItem(KEY);
  let r;
  try {
    r = await fetch("v2/status", { headers: key ? { "X-API-Key": key } : {}, cache: "no-store" });
  } catch (e) {
    $("#state").textContent = "cannot reach the app: " + e;
    return;
  }
  if (r.status === 401) {
    $("#key-form").hidden = false;
    $("#main").hidden = true;
    $("#state").textContent = key ? "the key was refused" : "operator key needed";
    return;
  }
  if (!r.ok) { $("#state").textContent = `status ${r.status}`; return; }
  const status = await r.json();
  const now = Date.now();
  const rows = devices(status, now);
  previous = Object.fromEntries(rows.filter((x) => !x.error).map((x) => [x.id,
    { at: now, swaps: x.swaps, pre: x.pre, batches: x.batches, compute: x.compute }]));
  push(history.swaps, rows.reduce((a, x) => a + (x.swapRate || 0), 0));
  push(history.queue, rows.reduce((a, x) => a + Object.values((x.d && x.d.queue_depth) || {}).reduce((s, v) => s + v, 0), 0));
  push(history.p99, Math.max(0, ...Object.values(status.models || {}).map((m) => m.p99_ms || 0)));
  plot($("#plot-swaps"), history.swaps, "swaps/s");
  plot($("#plot-queue"), history.queue, "queued requests");
  plot($("#plot-p99"), history.p99, "worst p99 (ms)");
  for (const p of PRIORITIES)
    push(history.classes[p], ((((status.classes || {}).by_class || {})[p] || {}).latency_ms || {}).p99 || 0);
  plotClasses($("#plot-classes"), history.classes);
  renderDevices(rows);
  renderClasses(status);
  renderModels(status);
  renderProblems(status);
  renderAlerts(status);
  $("#key-form").hidden = true;
  $("#main").hidden = false;
  $("#state").textContent = "updated " + new Date(now).toLocaleTimeString();
}

$("#key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("#key").value);
  poll();
});
poll();
setInterval(poll, 1000);
