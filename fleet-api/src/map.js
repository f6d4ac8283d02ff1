// The live map (served as /map.js, after /leaflet.js): draws the fleet on a canvas layer
// over the configured base map, with its geofences; follows the live stream
// /api/drones/stream (or polls /api/drones, when the page says so or the stream refuses it),
// marks fence crossings, answers clicks; asks the API with the credential of /signin.js.
// Leaflet projects, pans, zooms and finds the drone under the pointer.
"use strict";
const REFRESH_MS = Math.max(100, Number(document.body.dataset.refreshMs) || 2000);
const UPDATES = document.body.dataset.updates === "poll" ? "poll" : "stream";
// Ages are recoloured this often while streaming; the fences are read again this often.
const RECOLOUR_MS = 5000, FENCES_MS = 30000, ALERTS_MS = 10000, ALERTS_SHOWN = 20;
// Crossings listed in the panel.
const CROSSINGS_KEPT = 20;
// A click without a drag asks for the drones within this radius.
const CLICK_RADIUS_M = 1000;
const layer = id => document.getElementById(id);

const map = L.map("map", { boxZoom: false, zoomControl: true });
map.attributionControl.setPrefix(false);
L.control.scale({ imperial: false }).addTo(map);
// Drones are drawn on one canvas (thousands of dots); fences, tracks and queries are few
// and stay SVG elements.
const dronesCanvas = L.canvas({ padding: 0.2 });
const droneLayer = L.layerGroup().addTo(map);
const fenceLayer = L.layerGroup().addTo(map);
const overlayLayer = L.layerGroup().addTo(map);

// The fleet by drone id; each Feature's `at` is the time its age was 0, by this page's clock.
let fleet = new Map();
// The dot of each drawn drone, by id.
const dots = new Map();
let fences = [];
let crossings = [];
let moves = 0;
let selected = null;
let track = null;
let query = null;
let viewSet = false;

// Tiles the API fetches for the page (the tile server takes a key or a token the page must
// not hold): each asked with the page's credential and shown from a blob: URL.
const ApiTiles = L.TileLayer.extend({
  createTile(coords, done) {
    const img = document.createElement("img");
    img.alt = "";
    img.setAttribute("role", "presentation");
    fleetAuth.ready
      .then(() => fetch(this.getTileUrl(coords), { headers: fleetAuth.headers() }))
      .then(r => { if (!r.ok) throw new Error(`tile: ${r.status}`); return r.blob(); })
      .then(blob => {
        img.onload = () => { URL.revokeObjectURL(img.src); done(null, img); };
        img.onerror = () => done(new Error("tile: not an image"), img);
        img.src = URL.createObjectURL(blob);
      })
      .catch(e => done(e, img));
    return img;
  },
});

// The base map of /map/config.json, or a note that none is configured.
async function baseMap() {
  const tiles = (await (await fetch("/map/config.json")).json()).tiles;
  if (!tiles) {
    const note = L.control({ position: "topright" });
    note.onAdd = () => {
      const div = L.DomUtil.create("div", "no-basemap");
      div.id = "no-basemap";
      div.textContent = "No base map is configured (MAP_TILE_URL).";
      return div;
    };
    note.addTo(map);
    return;
  }
  const options = { attribution: tiles.attribution || "", maxZoom: 19 };
  const base = tiles.proxied ? new ApiTiles(tiles.url, options) : L.tileLayer(tiles.url, options);
  base.on("load", () => { document.body.dataset.tilesLoaded = String(Date.now()); });
  base.addTo(map);
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
// The dot's style for each link state (the legend in the panel shows the same).
function dotStyle(f) {
  const state = linkState(f);
  const style = { fillColor: state === "disconnected" ? "#fff" : colour(ageS(f)), fillOpacity: 1, color: "#1d2733", weight: 0.8, dashArray: null };
  if (state === "silent") Object.assign(style, { color: "#b3261e", weight: 2.5 });
  if (state === "disconnected") Object.assign(style, { color: "#5b6875", weight: 1.5, dashArray: "2 2" });
  if (f.id === selected) Object.assign(style, { color: "#000", weight: 2.5 });
  return [state, style];
}
const latLng = f => [f.geometry.coordinates[1], f.geometry.coordinates[0]];

// Draws drone `f`, or moves and restyles its dot where it is already drawn.
function placeDrone(f) {
  const [state, style] = dotStyle(f);
  let dot = dots.get(f.id);
  if (!dot) {
    dot = L.circleMarker(latLng(f), { renderer: dronesCanvas, radius: 5, bubblingMouseEvents: false, ...style });
    dot.droneId = f.id;
    dot.bindTooltip(() => { const d = fleet.get(dot.droneId); return `${d.id} · ${LINK_TEXT[linkState(d)]} · ${Math.round(ageS(d))} s ago`; });
    dot.on("click", () => { if (!dragged) select(dot.droneId); });
    dots.set(f.id, dot);
    droneLayer.addLayer(dot);
  } else {
    // Only what changed: each change asks the canvas to redraw.
    const [lat, lng] = latLng(f), at = dot.getLatLng();
    if (at.lat !== lat || at.lng !== lng) dot.setLatLng([lat, lng]);
    const o = dot.options;
    if (o.fillColor !== style.fillColor || o.color !== style.color || o.weight !== style.weight || o.dashArray !== style.dashArray) dot.setStyle(style);
  }
  dot.state = state;
}
function drawDrones() {
  for (const [id, dot] of dots) {
    if (!fleet.has(id)) { droneLayer.removeLayer(dot); dots.delete(id); }
  }
  for (const f of fleet.values()) placeDrone(f);
  document.body.dataset.drawn = String(dots.size);
}
function fit() {
  const drones = [...fleet.values()];
  if (!drones.length) { if (!viewSet) map.setView([0, 0], 2); viewSet = true; return; }
  map.fitBounds(L.latLngBounds(drones.map(latLng)).pad(0.08), { animate: false, maxZoom: 16 });
  viewSet = true;
}
function drawFences() {
  fenceLayer.clearLayers();
  const marked = new Set(crossings.filter(c => Date.now() - c.at < 60000).map(c => c.fence));
  for (const f of fences) {
    const crossed = marked.has(f.id);
    const style = crossed
      ? { color: "#b3261e", weight: 2.5, fillColor: "#b3261e", fillOpacity: 0.12 }
      : { color: "#7b3fa0", weight: 1.5, fillColor: "#7b3fa0", fillOpacity: 0.06 };
    const geom = f.geometry || {};
    let shape;
    if (geom.type === "Polygon") {
      shape = L.polygon(geom.coordinates[0].map(([lon, lat]) => [lat, lon]), style);
    } else if (geom.type === "Point" && f.properties && f.properties.subType === "Circle") {
      shape = L.circle([geom.coordinates[1], geom.coordinates[0]], { radius: f.properties.radius, ...style });
    } else continue;
    shape.bindTooltip(f.id, { permanent: true, direction: "right", className: "fence-label" });
    fenceLayer.addLayer(shape);
    shape.getElement().dataset.fenceId = f.id;
    shape.getElement().classList.toggle("crossed", crossed);
  }
}
function drawOverlays() {
  overlayLayer.clearLayers();
  const geom = track && track.geometry;
  if (geom && geom.type === "LineString") {
    overlayLayer.addLayer(L.polyline(geom.coordinates.map(([lon, lat]) => [lat, lon]), { color: "#2a6fdb", weight: 2, interactive: false, className: "track" }));
  }
  if (!query) return;
  overlayLayer.addLayer(L.circle([query.lat, query.lon], {
    radius: query.radius, color: "#2a6fdb", weight: 1, dashArray: "4 3", fillOpacity: 0.08, interactive: false,
  }));
  for (const f of query.hits || []) {
    overlayLayer.addLayer(L.circleMarker(latLng(f), { radius: 8, color: "#2a6fdb", weight: 2, fill: false, interactive: false }));
  }
}
function draw() {
  if (!viewSet) fit();
  drawFences(); drawOverlays(); drawDrones();
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
  const first = !viewSet;
  fleet = new Map(features.map(f => [f.id, stamp(f)]));
  if (first) fit();
  draw();
  if (first) fromAddress();
  document.body.dataset.updated = String(Date.now());
}
// One drone's new position, from the stream.
function move(f) {
  fleet.set(f.id, stamp(f));
  if (viewSet) placeDrone(f);
  moves += 1;
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
    move(data);
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
    if (viewSet) drawFences();
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
// A drone's track of the last hour, page after page (each page's continuation asks for the
// next), up to MAX_TRACK_PAGES; with the pages' positions, count and summed cost.
const MAX_TRACK_PAGES = 50;
async function readTrack(id) {
  const url = "/api/drones/" + encodeURIComponent(id) + "/track";
  const coordinates = [];
  let next = url, pages = 0, ru = 0, calls = 0, continuation = null;
  while (next && pages < MAX_TRACK_PAGES) {
    const [page, r] = await getJson(next);
    pages += 1;
    ru += Number(r.headers.get("x-query-request-charge")) || 0;
    calls += Number(r.headers.get("x-query-calls")) || 0;
    const g = page.geometry;
    if (g && g.type === "Point") coordinates.push(g.coordinates);
    if (g && g.type === "LineString") coordinates.push(...g.coordinates);
    continuation = page.properties.continuation;
    next = continuation ? url + "?continuation=" + encodeURIComponent(continuation) : null;
  }
  return {
    geometry: coordinates.length > 1 ? { type: "LineString", coordinates } : null,
    points: coordinates.length, pages, more: !!continuation,
    cost: `${ru.toFixed(2)} RU, ${calls} calls, ${pages} page${pages === 1 ? "" : "s"}`,
  };
}
async function select(id) {
  const before = fleet.get(selected);
  selected = id;
  if (before) placeDrone(before);
  if (fleet.has(id)) placeDrone(fleet.get(id));
  const detail = layer("detail");
  try {
    const [d, r1] = await getJson("/api/drones/" + encodeURIComponent(id));
    const t = await readTrack(id);
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
      ["track (last hour)", t.points ? t.points + (t.more ? "+" : "") + " positions" : "no history"],
      ["read", cost(r1)], ["track query", t.cost],
    ];
    detail.className = "";
    detail.dataset.trackPoints = String(t.points);
    detail.dataset.trackPages = String(t.pages);
    detail.replaceChildren(table(rows));
  } catch (e) {
    track = null;
    detail.className = "error";
    detail.textContent = e.message;
  }
  drawOverlays();
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
  drawOverlays();
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
  drawOverlays();
}

// `?select=ID` selects a drone, `?near=lat,lon,radius_m` draws a radius query: links that
// open the map on a drone or a question.
function fromAddress() {
  const q = new URLSearchParams(location.search);
  if (q.get("select")) select(q.get("select"));
  const near = (q.get("near") || "").split(",").map(Number);
  if (near.length === 3 && near.every(Number.isFinite)) ask(near[1], near[0], near[2]);
}

// A click asks for the drones within CLICK_RADIUS_M; a drag with Shift held, from a centre
// outwards, for those within the radius dragged (a drag without Shift pans). The drag is
// followed on the container before Leaflet sees it, also when it starts or ends on a dot; the
// click that ends it asks nothing more.
let drag = null, dragged = false;
const container = map.getContainer();
container.addEventListener("mousedown", e => {
  dragged = false;
  if (!viewSet || !e.shiftKey) return;
  map.dragging.disable();
  drag = map.mouseEventToLatLng(e);
}, true);
container.addEventListener("mousemove", e => {
  if (!drag) return;
  query = { lon: drag.lng, lat: drag.lat, radius: map.distance(drag, map.mouseEventToLatLng(e)), hits: [] };
  drawOverlays();
}, true);
container.addEventListener("mouseup", e => {
  if (!drag) return;
  map.dragging.enable();
  const centre = drag, radius = map.distance(drag, map.mouseEventToLatLng(e));
  drag = null;
  dragged = radius > 0;
  if (dragged) ask(centre.lng, centre.lat, radius);
}, true);
map.on("click", e => { if (viewSet && !dragged) ask(e.latlng.lng, e.latlng.lat, CLICK_RADIUS_M); });
layer("fit").addEventListener("click", () => { viewSet = false; fit(); });

// The newest alerts the alerter recorded; a click centres on the drone. Polled only while the
// page is visible (one small query per poll).
async function loadAlerts() {
  if (document.hidden) return;
  const [body] = await getJson(`/api/alerts?limit=${ALERTS_SHOWN}`);
  const list = layer("alerts");
  list.replaceChildren();
  for (const record of body.alerts) {
    const d = (record.event && record.event.data) || {};
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = "#";
    a.textContent = `${d.deviceId} ${d.rule} ${d.alert} ${d.deviceTime}`;
    a.dataset.drone = d.deviceId;
    a.addEventListener("click", e => {
      e.preventDefault();
      const f = fleet.get(d.deviceId);
      const at = f ? latLng(f) : d.location && [d.location.coordinates[1], d.location.coordinates[0]];
      if (at) { viewSet = true; map.setView(at, Math.max(map.getZoom(), 12)); }
      select(d.deviceId);
    });
    li.append(a);
    list.append(li);
  }
  if (!body.alerts.length) list.innerHTML = "<li>none recorded</li>";
}
const pollAlerts = () => loadAlerts().catch(e => status("alerts: " + e.message, true));

// For the browser tests: what the canvas shows, without pixels to read.
window.fleetMap = {
  // Each drawn drone: id, link state, fill colour and where its dot stands in the map's
  // container, in pixels.
  drones: () => [...dots.values()].map(d => {
    const p = map.latLngToContainerPoint(d.getLatLng());
    return { id: d.droneId, state: d.state, fill: d.options.fillColor, x: p.x, y: p.y };
  }),
  // The view: zoom and the bounds the container shows.
  view: () => {
    const b = map.getBounds();
    return { zoom: map.getZoom(), west: b.getWest(), south: b.getSouth(), east: b.getEast(), north: b.getNorth() };
  },
  setFleet,
  move,
};

baseMap().catch(e => status("base map: " + e.message, true));
loadFences();
setInterval(loadFences, FENCES_MS);
pollAlerts();
setInterval(pollAlerts, ALERTS_MS);
document.addEventListener("visibilitychange", () => { if (!document.hidden) pollAlerts(); });
if (UPDATES === "poll") {
  polling();
} else {
  streaming();
  setInterval(() => { if (viewSet) { drawDrones(); drawFences(); } }, RECOLOUR_MS);
}
