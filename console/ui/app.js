// The Hivekeeper console: one page, five views, each fed by one server-sent event stream
// (/api/v1/events?view=...) while it is on screen. Written for this page: no library.
"use strict";

// Errors the page met, for the browser tests to read back (window.__consoleErrors).
window.__consoleErrors = [];
window.addEventListener("error", (e) => window.__consoleErrors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.__consoleErrors.push(String(e.reason)));
(function () {
  const original = console.error;
  console.error = function (...args) {
    window.__consoleErrors.push(args.map(String).join(" "));
    original.apply(console, args);
  };
})();

const state = { session: null, view: "airspace", stream: null, airspace: [], timer: null };
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function message(text) {
  $("message").textContent = text || "";
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = body.error || { code: "unavailable", message: response.statusText };
    const failure = new Error(error.code + ": " + error.message);
    failure.status = response.status;
    throw failure;
  }
  return body;
}

async function start() {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => show(button.dataset.view));
  }
  $("login-form").addEventListener("submit", login);
  $("resource-prefix").addEventListener("input", debounce(() => show("resources")));
  $("resource-kind").addEventListener("change", () => show("resources"));
  $("key-prefix").addEventListener("input", debounce(() => show("keys")));
  $("time-slider").addEventListener("input", () => drawAirspace());
  $("map").addEventListener("mousemove", hover);
  $("map").addEventListener("mouseleave", () => ($("tooltip").hidden = true));
  state.session = await api("/api/v1/session");
  entered();
}

function entered() {
  const session = state.session;
  if (session.auth && !session.logged_in) {
    $("login").hidden = false;
    $("main").hidden = true;
    $("who").textContent = "";
    return;
  }
  $("login").hidden = true;
  $("main").hidden = false;
  $("who").textContent = session.auth
    ? session.account + " (" + session.role + ")"
    : session.can_write ? "no authentication (--insecure: writes allowed)" : "no authentication: read-only";
  if (session.auth) {
    const out = el("button", { id: "logout", type: "button" }, "log out");
    out.addEventListener("click", async () => {
      await api("/api/v1/logout", { method: "POST" });
      location.reload();
    });
    $("who").append(" ", out);
  }
  show(state.view);
}

async function login(event) {
  event.preventDefault();
  $("login-error").textContent = "";
  try {
    state.session = await api("/api/v1/login", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ account: $("login-account").value, secret: $("login-secret").value }),
    });
    entered();
  } catch (error) {
    $("login-error").textContent = error.message;
  }
}

function debounce(action) {
  let pending = null;
  return () => {
    clearTimeout(pending);
    pending = setTimeout(action, 250);
  };
}

// The stream URL of each view, from its controls.
function streamUrl(view) {
  const query = new URLSearchParams({ view: view });
  if (view === "airspace") query.set("all", "1");
  if (view === "resources") {
    const prefix = $("resource-prefix").value;
    const kind = $("resource-kind").value;
    if (prefix) query.set("prefix", prefix);
    if (kind) query.set("kind", kind);
  }
  if (view === "leases") query.set("holdings", "1");
  if (view === "keys") query.set("prefix", $("key-prefix").value);
  return "/api/v1/events?" + query.toString();
}

const renderers = {
  airspace: (data) => {
    state.airspace = shapesOf(data.resources || []);
    $("airspace-count").textContent = state.airspace.length + " volumes" + (data.truncated ? " (truncated)" : "");
    drawAirspace();
  },
  resources: renderResources,
  leases: renderLeases,
  keys: renderKeys,
  cluster: renderCluster,
};

function show(view) {
  state.view = view;
  for (const button of document.querySelectorAll("#tabs button")) {
    button.classList.toggle("active", button.dataset.view === view);
  }
  for (const section of document.querySelectorAll(".view")) {
    section.hidden = section.id !== "view-" + view;
  }
  if (state.stream) state.stream.close();
  message("");
  const stream = new EventSource(streamUrl(view));
  state.stream = stream;
  const render = renderers[view];
  const name = view === "airspace" ? "resources" : view;
  stream.addEventListener(name, (event) => {
    $("live").classList.add("on");
    message("");
    render(JSON.parse(event.data));
  });
  stream.addEventListener("refused", (event) => {
    const error = JSON.parse(event.data);
    message(error.code + ": " + error.message);
  });
  stream.onerror = () => $("live").classList.remove("on");
}

// ---- Airspace ----------------------------------------------------------------------------

// Every held or queued volume of the waypoints and routes, flat.
function shapesOf(resources) {
  const shapes = [];
  for (const resource of resources) {
    const add = (who, queued) => {
      const volumes = who.volumes && who.volumes.length
        ? who.volumes
        : who.area
          ? [Object.assign({}, who.area, { start_ms: who.start_ms, end_ms: who.end_ms })]
          : [];
      for (const volume of volumes) {
        shapes.push({
          name: resource.name,
          agent: who.agent,
          token: who.token,
          position: who.position,
          priority: who.priority,
          queued: queued,
          vacate: who.vacate_by_ms,
          lat: volume.lat,
          lon: volume.lon,
          radius: volume.radius_m,
          altMin: volume.alt_min_m,
          altMax: volume.alt_max_m,
          start: volume.start_ms,
          end: volume.end_ms,
        });
      }
    };
    for (const holder of resource.holders || []) add(holder, false);
    for (const waiter of resource.waiters || []) add(waiter, true);
  }
  return shapes;
}

// Metres east and north of the shapes' centre: a local projection, good over a city.
function projection(shapes, width, height) {
  let lat0 = 0, lon0 = 0;
  for (const s of shapes) { lat0 += s.lat; lon0 += s.lon; }
  lat0 /= Math.max(shapes.length, 1);
  lon0 /= Math.max(shapes.length, 1);
  const east = 111320 * Math.cos((lat0 * Math.PI) / 180);
  const north = 110540;
  let extent = 100;
  for (const s of shapes) {
    extent = Math.max(extent, Math.abs((s.lon - lon0) * east) + s.radius, Math.abs((s.lat - lat0) * north) + s.radius);
  }
  const scale = (Math.min(width, height) / 2 - 10) / extent;
  return {
    scale: scale,
    lat0: lat0,
    lon0: lon0,
    x: (lon) => width / 2 + (lon - lon0) * east * scale,
    y: (lat) => height / 2 - (lat - lat0) * north * scale,
  };
}

function sliderTime() {
  return Date.now() + Number($("time-slider").value) * 1000;
}

function drawAirspace() {
  const started = performance.now();
  const canvas = $("map");
  const context = canvas.getContext("2d");
  const offset = Number($("time-slider").value);
  $("time-label").textContent = offset === 0 ? "now" : "now + " + Math.round(offset / 60) + " min";
  context.clearRect(0, 0, canvas.width, canvas.height);
  const at = sliderTime();
  const shapes = state.airspace.filter((s) => s.end === undefined || s.end > at);
  const map = projection(shapes, canvas.width, canvas.height);
  if (state.session && state.session.tile_url && shapes.length) drawTiles(context, map, canvas);
  const drawn = [];
  for (const s of shapes) {
    const x = map.x(s.lon), y = map.y(s.lat), r = Math.max(2, s.radius * map.scale);
    const ahead = s.start !== undefined && s.start > at;
    context.beginPath();
    context.arc(x, y, r, 0, 2 * Math.PI);
    context.setLineDash(s.queued ? [5, 4] : []);
    if (!s.queued && !ahead) {
      context.fillStyle = "rgba(31, 119, 180, 0.25)";
      context.fill();
    }
    context.lineWidth = s.vacate ? 3 : 1.5;
    context.strokeStyle = s.vacate ? "#d62728" : s.queued ? "#ff7f0e" : ahead ? "#9aa5b1" : "#1f77b4";
    context.stroke();
    s.x = x; s.y = y; s.r = r;
    drawn.push(s.name);
  }
  context.setLineDash([]);
  state.drawn = shapes;
  // What was drawn, for the browser tests (a canvas cannot be read back as shapes).
  const names = Array.from(new Set(drawn)).sort();
  canvas.dataset.drawn = names.join(",");
  canvas.dataset.count = String(drawn.length);
  canvas.dataset.drawMs = String(Math.round(performance.now() - started));
}

// ---- Map tiles (only when the operator configured a tile URL) -----------------------------

const tiles = new Map();
let tileRedraw = null;

// Slippy-map tiles (Web Mercator) under the local projection: the zoom whose metres per pixel
// match the projection's, each tile scaled from there. Good over the few kilometres a view spans.
function drawTiles(context, map, canvas) {
  const metresPerPixel = 1 / map.scale;
  const cosLat = Math.cos((map.lat0 * Math.PI) / 180);
  const exact = Math.log2((156543.03392 * cosLat) / metresPerPixel);
  const zoom = Math.max(0, Math.min(19, Math.floor(exact)));
  const size = 256 * Math.pow(2, exact - zoom);
  const world = (lat, lon) => {
    const n = Math.pow(2, zoom);
    const rad = (lat * Math.PI) / 180;
    return [((lon + 180) / 360) * n, ((1 - Math.log(Math.tan(rad) + 1 / Math.cos(rad)) / Math.PI) / 2) * n];
  };
  const [cx, cy] = world(map.lat0, map.lon0);
  const left = cx - canvas.width / 2 / size, top = cy - canvas.height / 2 / size;
  const limit = Math.pow(2, zoom);
  for (let tx = Math.floor(left); tx < left + canvas.width / size; tx++) {
    for (let ty = Math.floor(top); ty < top + canvas.height / size; ty++) {
      if (tx < 0 || ty < 0 || tx >= limit || ty >= limit) continue;
      const url = state.session.tile_url.replace("{z}", zoom).replace("{x}", tx).replace("{y}", ty);
      let image = tiles.get(url);
      if (!image) {
        image = new Image();
        image.onload = () => {
          clearTimeout(tileRedraw);
          tileRedraw = setTimeout(drawAirspace, 50);
        };
        image.src = url;
        tiles.set(url, image);
      }
      if (image.complete && image.naturalWidth) {
        context.drawImage(image, (tx - left) * size, (ty - top) * size, size, size);
      }
    }
  }
}

function hover(event) {
  const canvas = $("map");
  const box = canvas.getBoundingClientRect();
  const x = ((event.clientX - box.left) * canvas.width) / box.width;
  const y = ((event.clientY - box.top) * canvas.height) / box.height;
  const hit = (state.drawn || []).find((s) => (s.x - x) ** 2 + (s.y - y) ** 2 <= s.r * s.r);
  const tip = $("tooltip");
  if (!hit) {
    tip.hidden = true;
    return;
  }
  const time = (ms) => (ms === undefined ? "-" : new Date(ms).toISOString().slice(11, 19));
  tip.textContent = [
    hit.name + (hit.queued ? " (queued #" + hit.position + ")" : ""),
    "holder: " + hit.agent + (hit.token !== undefined ? "  token " + hit.token : ""),
    "priority: " + (hit.priority || "normal"),
    "altitude: " + hit.altMin + " to " + hit.altMax + " m",
    "window: " + time(hit.start) + " to " + time(hit.end) + " UTC",
    hit.vacate ? "vacate by: " + time(hit.vacate) : null,
  ].filter(Boolean).join("\n");
  tip.style.left = x + 12 + "px";
  tip.style.top = y + 12 + "px";
  tip.hidden = false;
}

// ---- Locks and recipes -------------------------------------------------------------------

function describeHolder(holder) {
  let text = holder.agent + "  #" + holder.token;
  if (holder.mode && holder.mode !== "exclusive") text += "  " + holder.mode;
  if (holder.permits) text += "  ×" + holder.permits;
  return text;
}

function renderResources(data) {
  const rows = (data.resources || []).map((resource) => {
    const holders = el("ul", {}, ...resource.holders.map((h) =>
      el("li", { "data-agent": h.agent, "data-token": h.token }, describeHolder(h), revokeButton(h.lease))));
    const queue = el("ol", { class: "queue" }, ...resource.waiters.map((w) =>
      el("li", { "data-agent": w.agent }, w.agent + (w.mode && w.mode !== "exclusive" ? "  " + w.mode : ""))));
    let kind = resource.kind;
    if (resource.limit !== undefined) kind += " (" + (resource.count || 0) + "/" + resource.limit + ")";
    return el("tr", { "data-resource": resource.kind + "/" + resource.name },
      el("td", {}, kind), el("td", {}, resource.name), el("td", {}, holders), el("td", {}, queue));
  });
  $("resource-rows").replaceChildren(...rows);
}

// ---- Leases ------------------------------------------------------------------------------

function revokeButton(lease) {
  if (!lease || !state.session || !state.session.can_write) return null;
  const button = el("button", { type: "button", class: "revoke", "data-revoke": lease }, "revoke");
  button.addEventListener("click", async () => {
    if (!confirm("Revoke lease " + lease + "? Everything it holds is released.")) return;
    try {
      await api("/api/v1/leases/" + encodeURIComponent(lease) + "/revoke", {
        method: "POST",
        headers: { "x-csrf-token": state.session.csrf },
      });
    } catch (error) {
      message(error.message);
    }
  });
  return button;
}

function renderLeases(data) {
  const holdings = data.holdings || {};
  const rows = (data.leases || []).map((lease) => {
    const held = (holdings[lease.lease] || []).map((h) => h.kind + " " + h.name + " #" + h.token);
    const left = lease.remaining_ms === undefined ? "-" : (lease.remaining_ms / 1000).toFixed(1) + " s";
    return el("tr", { "data-lease": lease.lease },
      el("td", {}, lease.lease), el("td", {}, lease.agent), el("td", {}, lease.ttl_ms / 1000 + " s"),
      el("td", {}, left), el("td", {}, held.join(", ")), el("td", {}, revokeButton(lease.lease)));
  });
  $("lease-rows").replaceChildren(...rows);
}

// ---- Keys --------------------------------------------------------------------------------

function renderKeys(data) {
  $("key-revision").textContent = "revision " + data.revision + (data.next_after ? " (more keys follow)" : "");
  const rows = (data.kvs || []).map((kv) =>
    el("tr", { "data-key": kv.key }, el("td", {}, kv.key), el("td", {}, kv.value),
      el("td", {}, kv.mod_revision !== undefined ? kv.mod_revision : ""), el("td", {}, kv.lease || "")));
  $("key-rows").replaceChildren(...rows);
}

// ---- Cluster -----------------------------------------------------------------------------

// This member's log (entries kept since the last purge, and their files) and state file.
function storageText(data) {
  const entries = (data.last_log_index || 0) - (data.purged_index || 0);
  const mb = (bytes) => (bytes / 1e6).toFixed(1) + " MB";
  if (!data.storage) return " · log " + entries + " entries";
  return " · log " + entries + " entries, " + mb(data.storage.log_bytes) +
    " · state file (snapshots, vote) " + mb(data.storage.state_file_bytes);
}

function renderCluster(data) {
  const quorum = data.has_quorum === false ? "NO QUORUM" : "quorum";
  $("cluster-summary").textContent = "member " + data.node_id + " · term " + data.term +
    " · leader " + (data.leader_id === undefined ? "none" : data.leader_id) + " · " + quorum +
    " · last log " + (data.last_log_index || 0) + " · committed " + (data.committed_index || 0) +
    " · applied " + (data.applied_index || 0) + " · snapshot " + (data.snapshot_index || "none") +
    " · purged " + (data.purged_index || "none") + storageText(data);
  const rows = (data.member_views || []).map((member) => {
    const stateText = member.reachable === null || member.reachable === undefined
      ? "?" : member.reachable ? "up" : "down";
    return el("tr", { "data-member": member.name || String(member.id), "data-state": stateText },
      el("td", {}, member.name || "(single node)"), el("td", {}, member.id), el("td", {}, member.addr),
      el("td", {}, member.role), el("td", { class: stateText === "down" ? "down" : stateText === "up" ? "up" : "" }, stateText),
      el("td", {}, member.matched_index === undefined ? "" : member.matched_index),
      el("td", {}, member.lag === undefined ? "" : member.lag));
  });
  $("member-rows").replaceChildren(...rows);
}

start().catch((error) => {
  message(String(error.message || error));
});
