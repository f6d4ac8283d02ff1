// The live map (served as /map.js): draws the fleet and its geofences, follows the live
// stream /api/drones/stream (or polls /api/drones, when the page says so or the stream
// refuses it), marks fence crossings, answers clicks; asks the API with the credential of
// /signin.js.
"use strict";
const SVGNS = "http://www.w3.org/2000/svg";
const EARTH_M = 6371008.8;
const REFRESH_MS = Math.max(100, Number(document.body.dataset.refreshMs) || 2000);
const UPDATES = document.body.dataset.updates === "poll" ? "poll" : "stream";
// Ages are recoloured this often while streaming; the fences are read again this often.
const RECOLOUR_MS = 5000, FENCES_MS = 30000;
// Crossings listed in the panel.
const CROSSINGS_KEPT = 20;
const svg = document.getElementById("map");
const layer = id => document.getElementById(id);
// View: centre (lon, lat) and pixels per degree of latitude.
let view = null;
// The fleet by drone id; each Feature's `at` is the time its age was 0, by this page's clock.
let fleet = new Map();
let fences = [];
let crossings = [];
let moves = 0;
let selected = null;
let track = null;
let query = null;

function el(name, attrs, parent) {
  const e = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function size() { const r = svg.getBoundingClientRect(); return [r.width || 800, r.height || 600]; }
function project(lon, lat) {
  const [w, h] = size();
  const k = Math.cos(view.lat * Math.PI / 180);
  return [w / 2 + (lon - view.lon) * k * view.ppd, h / 2 - (lat - view.lat) * view.ppd];
}
function unproject(x, y) {
  const [w, h] = size();
  const k = Math.cos(view.lat * Math.PI / 180);
  return [view.lon + (x - w / 2) / (k * view.ppd), view.lat - (y - h / 2) / view.ppd];
}
function metresPerPixel() { return (Math.PI / 180) * EARTH_M / view.ppd; }
function haversine(a, b) {
  const r = Math.PI / 180, dlat = (b[1] - a[1]) * r, dlon = (b[0] - a[0]) * r;
  const h = Math.sin(dlat / 2) ** 2 + Math.cos(a[1] * r) * Math.cos(b[1] * r) * Math.sin(dlon / 2) ** 2;
  return 2 * EARTH_M * Math.asin(Math.min(1, Math.sqrt(h)));
}
function stamp(f) { f.at = Date.now() - (f.properties.ageS || 0) * 1000; return f; }
function ageS(f) { return (Date.now() - f.at) / 1000; }
function colour(ageS) {
  if (ageS < 30) return "#2e9d4a";
  if (ageS < 120) return "#e3b31c";
  if (ageS < 300) return "#e8731f";
  return "#9aa4ad";
}
// The drone's link, from its agent's connection state (IoT Hub's routed events, when the hub
// routes them) and its position's age: "current" (a fresh position), "silent" (its agent is
// connected but no position came for SILENT_AFTER_S: no fix), "disconnected" (its agent
// disconnected), "unreported" (no connection state known and no fresh position).
const SILENT_AFTER_S = 60;
function linkState(f) {
  const agent = f.properties.agent || {};
  if (agent.connected === false) return "disconnected";
  if (ageS(f) < SILENT_AFTER_S) return "current";
  return agent.connected === true ? "silent" : "unreported";
}
const LINK_TEXT = { current: "current", silent: "connected, no fix", disconnected: "disconnected", unreported: "no position lately" };
function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
function fit() {
  const drones = [...fleet.values()];
  if (!drones.length) { view = view || { lon: 0, lat: 0, ppd: 2 }; return; }
  const lons = drones.map(d => d.geometry.coordinates[0]);
  const lats = drones.map(d => d.geometry.coordinates[1]);
  const [minLon, maxLon, minLat, maxLat] = [Math.min(...lons), Math.max(...lons), Math.min(...lats), Math.max(...lats)];
  const lat = (minLat + maxLat) / 2, lon = (minLon + maxLon) / 2;
  const k = Math.cos(lat * Math.PI / 180);
  const [w, h] = size();
  const spanX = Math.max((maxLon - minLon) * k, 0.002), spanY = Math.max(maxLat - minLat, 0.002);
  view = { lon, lat, ppd: 0.85 * Math.min(w / spanX, h / spanY) };
}

function drawGraticule() {
  const g = layer("grat"); g.replaceChildren();
  const [w, h] = size();
  const [lon0, lat1] = unproject(0, 0), [lon1, lat0] = unproject(w, h);
  const step = niceStep((lat1 - lat0) / 6);
  const digits = Math.max(0, -Math.floor(Math.log10(step)));
  for (let lat = Math.ceil(lat0 / step) * step; lat <= lat1; lat += step) {
    const y = project(lon0, lat)[1];
    el("line", { class: "grat", x1: 0, x2: w, y1: y, y2: y }, g);
    el("text", { class: "grat-label", x: 4, y: y - 3 }, g).textContent = lat.toFixed(digits) + "°";
  }
  const lonStep = niceStep((lon1 - lon0) / 6);
  const lonDigits = Math.max(0, -Math.floor(Math.log10(lonStep)));
  for (let lon = Math.ceil(lon0 / lonStep) * lonStep; lon <= lon1; lon += lonStep) {
    const x = project(lon, lat0)[0];
    el("line", { class: "grat", x1: x, x2: x, y1: 0, y2: h }, g);
    el("text", { class: "grat-label", x: x + 3, y: h - 4 }, g).textContent = lon.toFixed(lonDigits) + "°";
  }
}
function drawScale() {
  const g = layer("scale"); g.replaceChildren();
  const [, h] = size();
  const metres = niceStep(metresPerPixel() * 120);
  const px = metres / metresPerPixel();
  const x = 16, y = h - 24;
  el("rect", { x: x - 6, y: y - 18, width: px + 12, height: 28, fill: "rgba(255,255,255,0.8)" }, g);
  el("path", { d: `M${x} ${y - 5}V${y}H${x + px}V${y - 5}`, fill: "none", stroke: "#1d2733", "stroke-width": 2 }, g);
  el("text", { x, y: y - 8, "font-size": 11 }, g).textContent = metres >= 1000 ? metres / 1000 + " km" : metres + " m";
}
// Draws drone `f`, or moves its dot where it is already drawn.
function placeDrone(f, g) {
  const [x, y] = project(...f.geometry.coordinates);
  let c = g.querySelector(`[data-drone-id="${CSS.escape(f.id)}"]`);
  if (!c) {
    c = el("circle", { r: 5, "data-drone-id": f.id }, g);
    el("title", {}, c);
    c.addEventListener("mousedown", e => e.stopPropagation());
    c.addEventListener("click", e => { e.stopPropagation(); select(f.id); });
  }
  const state = linkState(f);
  c.setAttribute("class", `drone ${state}` + (f.id === selected ? " selected" : ""));
  c.setAttribute("data-state", state);
  c.setAttribute("cx", x);
  c.setAttribute("cy", y);
  c.setAttribute("fill", state === "disconnected" ? "#fff" : colour(ageS(f)));
  c.firstChild.textContent = `${f.id} · ${LINK_TEXT[state]} · ${Math.round(ageS(f))} s ago`;
}
function drawDrones() {
  const g = layer("drones"); g.replaceChildren();
  for (const f of fleet.values()) placeDrone(f, g);
}
function drawFences() {
  const g = layer("fences"); g.replaceChildren();
  const marked = new Set(crossings.filter(c => Date.now() - c.at < 60000).map(c => c.fence));
  for (const f of fences) {
    const cls = "fence" + (marked.has(f.id) ? " crossed" : "");
    const geom = f.geometry || {};
    let anchor;
    if (geom.type === "Polygon") {
      const ring = geom.coordinates[0].map(c => project(...c));
      el("polygon", { class: cls, points: ring.map(p => p.join(",")).join(" "), "data-fence-id": f.id }, g);
      anchor = ring[0];
    } else if (geom.type === "Point" && f.properties && f.properties.subType === "Circle") {
      const [x, y] = project(...geom.coordinates);
      el("circle", { class: cls, cx: x, cy: y, r: f.properties.radius / metresPerPixel(), "data-fence-id": f.id }, g);
      anchor = [x, y];
    } else continue;
    el("text", { class: "fence-label", x: anchor[0] + 4, y: anchor[1] - 4 }, g).textContent = f.id;
  }
}
function drawTrack() {
  const g = layer("tracks"); g.replaceChildren();
  const geom = track && track.geometry;
  if (!geom || geom.type !== "LineString") return;
  el("polyline", { class: "track", points: geom.coordinates.map(c => project(...c).join(",")).join(" ") }, g);
}
function drawQuery() {
  const g = layer("queries"); g.replaceChildren();
  if (!query) return;
  const [x, y] = project(query.lon, query.lat);
  el("circle", { class: "query", cx: x, cy: y, r: query.radius / metresPerPixel() }, g);
  for (const f of query.hits || []) {
    const [hx, hy] = project(...f.geometry.coordinates);
    el("circle", { class: "hit", cx: hx, cy: hy, r: 8 }, g);
  }
}
function draw() {
  if (!view) fit();
  drawGraticule(); drawFences(); drawTrack(); drawQuery(); drawDrones(); drawScale();
}

function status(text, error) {
  const s = layer("status");
  s.textContent = text;
  s.className = error ? "error" : "muted";
}
function cost(r) {
  return `${r.headers.get("x-query-request-charge") || "?"} RU, ${r.headers.get("x-query-calls") || "?"} calls`;
}
async function getJson(url, init) {
  await fleetAuth.ready;
  const r = await fetch(url, { ...init, headers: { ...(init && init.headers), ...fleetAuth.headers() } });
  if (r.status === 401) await fleetAuth.unauthorized();
  const body = await r.json();
  if (!r.ok) throw new Error(body.message || r.status);
  return [body, r];
}

// The whole fleet, from a snapshot or a poll.
function setFleet(features) {
  const first = !view;
  fleet = new Map(features.map(f => [f.id, stamp(f)]));
  if (first) fit();
  draw();
  if (first) fromAddress();
  document.body.dataset.updated = String(Date.now());
}

// Polling: the fleet every REFRESH_MS.
async function poll() {
  try {
    const [body, r] = await getJson("/api/drones");
    setFleet(body.features);
    status(`${fleet.size} drones · ${new Date().toLocaleTimeString()} · ${cost(r)}`);
  } catch (e) {
    status("update failed: " + e.message, true);
  }
}
async function polling() {
  await poll();
  setTimeout(polling, REFRESH_MS);
}

// The live stream: the fleet as a snapshot, then each move and crossing as it happens.
// After an interruption it reconnects with the last event's id and gets what it missed.
let lastEventId = null;
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
async function streaming() {
  for (;;) {
    let wait = REFRESH_MS;
    try {
      await fleetAuth.ready;
      const headers = { accept: "text/event-stream", ...fleetAuth.headers() };
      if (lastEventId !== null) headers["last-event-id"] = lastEventId;
      const r = await fetch("/api/drones/stream", { headers });
      if (r.status === 401) { await fleetAuth.unauthorized(); continue; }
      if (r.status === 503 || r.status === 429) {
        // As many viewers as the API allows (503), or as this caller may have (429): poll
        // until a place is free.
        const body = await r.json().catch(() => ({}));
        wait = 1000 * (Number(r.headers.get("retry-after")) || 5);
        await poll();
        status(`polling: ${body.message || "the live stream is busy"}`, true);
      } else if (!r.ok) {
        throw new Error((await r.json().catch(() => ({}))).message || r.status);
      } else {
        status(`${fleet.size} drones · live`);
        await readEvents(r.body, onEvent);
        status("live stream ended; reconnecting", true);
      }
    } catch (e) {
      status("live stream interrupted: " + e.message, true);
    }
    await sleep(wait);
  }
}
// Reads server-sent events from `body` until it ends, calling `handle(name, data)` for each.
async function readEvents(body, handle) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message", id = null;
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? "" : line.slice(colon + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "event") name = v;
        else if (field === "data") data.push(v);
        else if (field === "id") id = v;
      }
      if (id !== null) lastEventId = id;
      if (data.length) handle(name, JSON.parse(data.join("\n")));
    }
  }
}
function onEvent(name, data) {
  if (name === "snapshot") {
    setFleet(data.features);
  } else if (name === "position") {
    fleet.set(data.id, stamp(data));
    if (view) placeDrone(data, layer("drones"));
    moves += 1;
    document.body.dataset.updated = String(Date.now());
  } else if (name === "enter" || name === "leave") {
    crossings.unshift({ ...data, kind: name, at: Date.now() });
    crossings.length = Math.min(crossings.length, CROSSINGS_KEPT);
    if (!fences.some(f => f.id === data.fence)) loadFences();
    drawFences();
    drawCrossings();
    return;
  } else return;
  status(`${fleet.size} drones · live · ${moves} moves since ${new Date(started).toLocaleTimeString()}`);
}
const started = Date.now();

function drawCrossings() {
  const out = layer("crossings");
  if (!crossings.length) return;
  out.className = "";
  out.replaceChildren(table(crossings.map(c => [
    new Date(c.at).toLocaleTimeString(), c.deviceId, c.kind, c.fence,
  ])));
}
async function loadFences() {
  try {
    const [body] = await getJson("/api/geofences");
    fences = body.features;
    if (view) drawFences();
  } catch (e) {
    layer("crossings").textContent = "geofences: " + e.message;
  }
}

function agentText(agent) {
  if (!agent || agent.connected == null) return agent && agent.version ? agent.version : "–";
  return (agent.connected ? "connected" : "disconnected") + (agent.version ? ", version " + agent.version : "");
}
function satellites(gnss) {
  if (!gnss || gnss.sats == null) return "–";
  return gnss.sats + (gnss.satsVisible == null ? "" : " of " + gnss.satsVisible + " visible");
}
async function select(id) {
  selected = id;
  drawDrones();
  const detail = layer("detail");
  try {
    const [d, r1] = await getJson("/api/drones/" + encodeURIComponent(id));
    const [t, r2] = await getJson("/api/drones/" + encodeURIComponent(id) + "/track");
    track = t;
    const p = d.properties;
    const rows = [
      ["id", p.deviceId], ["seq", p.seq], ["device time", p.deviceTime], ["age", Math.round(p.ageS) + " s"],
      ["position", d.geometry.coordinates.map(c => c.toFixed(5)).join(", ")],
      ["altitude", p.altM == null ? "–" : p.altM.toFixed(1) + " m"],
      ["speed", p.speedMps == null ? "–" : p.speedMps.toFixed(1) + " m/s"],
      ["battery", p.batteryPct == null ? "–" : p.batteryPct + " %"],
      ["link", LINK_TEXT[linkState(stamp(d))]],
      ["agent", agentText(p.agent)],
      ["connected at", (p.agent && p.agent.connectedAt) || "–"],
      ["disconnected at", (p.agent && p.agent.disconnectedAt) || "–"],
      ["GNSS fix", (p.gnss && p.gnss.fix) || "–"],
      ["satellites", satellites(p.gnss)],
      ["horizontal accuracy", p.gnss && p.gnss.hAccM != null ? p.gnss.hAccM.toFixed(1) + " m" : "–"],
      ["track (last hour)", t.properties.points ? t.properties.points + " positions" : "no history documents"],
      ["read", cost(r1)], ["track query", cost(r2)],
    ];
    detail.className = "";
    detail.replaceChildren(table(rows));
  } catch (e) {
    track = null;
    detail.className = "error";
    detail.textContent = e.message;
  }
  drawTrack();
}
function table(rows) {
  const t = document.createElement("table");
  for (const cells of rows) {
    const tr = t.insertRow();
    cells.forEach((c, i) => { const td = tr.insertCell(); td.textContent = c; if (i) td.className = "n"; });
  }
  return t;
}
async function ask(lon, lat, radius) {
  radius = Math.max(1, Math.round(radius));
  query = { lon, lat, radius, hits: [] };
  drawQuery();
  const out = layer("result");
  try {
    const url = `/api/drones/near?lat=${lat.toFixed(6)}&lon=${lon.toFixed(6)}&radius_m=${radius}`;
    const [body, r] = await getJson(url);
    query.hits = body.features;
    out.className = "";
    const head = document.createElement("div");
    head.textContent = `${body.features.length} drones within ${radius} m · ${cost(r)}`;
    out.replaceChildren(head, table(body.features.slice(0, 50).map(f => [f.id, Math.round(f.properties.distanceM) + " m"])));
  } catch (e) {
    out.className = "error";
    out.textContent = e.message;
  }
  drawQuery();
}

// `?select=ID` selects a drone, `?near=lat,lon,radius_m` draws a radius query: links that
// open the map on a drone or a question.
function fromAddress() {
  const q = new URLSearchParams(location.search);
  if (q.get("select")) select(q.get("select"));
  const near = (q.get("near") || "").split(",").map(Number);
  if (near.length === 3 && near.every(Number.isFinite)) ask(near[1], near[0], near[2]);
}

let drag = null;
svg.addEventListener("mousedown", e => {
  if (!view) return;
  const [lon, lat] = unproject(e.offsetX, e.offsetY);
  drag = { lon, lat, x: e.offsetX, y: e.offsetY };
});
svg.addEventListener("mousemove", e => {
  if (!drag) return;
  const [lon, lat] = unproject(e.offsetX, e.offsetY);
  query = { lon: drag.lon, lat: drag.lat, radius: haversine([drag.lon, drag.lat], [lon, lat]), hits: [] };
  drawQuery();
});
svg.addEventListener("mouseup", e => {
  if (!drag) return;
  const moved = Math.hypot(e.offsetX - drag.x, e.offsetY - drag.y) > 4;
  const [lon, lat] = unproject(e.offsetX, e.offsetY);
  const radius = moved ? haversine([drag.lon, drag.lat], [lon, lat]) : 1000;
  ask(drag.lon, drag.lat, radius);
  drag = null;
});
svg.addEventListener("wheel", e => {
  if (!view) return;
  e.preventDefault();
  const before = unproject(e.offsetX, e.offsetY);
  view.ppd *= e.deltaY < 0 ? 1.25 : 0.8;
  const after = unproject(e.offsetX, e.offsetY);
  view.lon += before[0] - after[0];
  view.lat += before[1] - after[1];
  draw();
}, { passive: false });
layer("fit").addEventListener("click", () => { fit(); draw(); });
window.addEventListener("resize", draw);
loadFences();
setInterval(loadFences, FENCES_MS);
if (UPDATES === "poll") {
  polling();
} else {
  streaming();
  setInterval(() => { if (view) { drawDrones(); drawFences(); } }, RECOLOUR_MS);
}
