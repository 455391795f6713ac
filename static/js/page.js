// Page controller shared by every page: reads #client-config, wires the session controls of base.html to an
// RtcClient, and loads the app's own module (static/js/apps/<app>.js) when the page has one.
//
// Debug / test handle: window.rtcAgent = {client, state(), connect(), disconnect(), ...}.

import { RtcClient } from "./rtc-client.js";
import { DeviceManager } from "./devices.js";
import { EventLog } from "./event-log.js";
import { LevelMeter, audioContext } from "./meters.js";

const $ = (id) => document.getElementById(id);

function readConfig() {
  const el = $("client-config");
  const defaults = { app: "", heartbeat_interval_ms: 2000, media: { audio: true, video: false }, session_config: {} };
  if (!el) return defaults;
  try {
    const parsed = JSON.parse(el.textContent || "{}");
    return { ...defaults, ...parsed, media: { ...defaults.media, ...(parsed.media || {}) } };
  } catch (err) {
    console.error("bad #client-config", err);
    return defaults;
  }
}

// ------------------------------------------------------------------ error banner

function makeErrorBanner() {
  const banner = $("error");
  const text = $("error-message") || banner;
  const dismiss = $("error-dismiss");
  const api = {
    show(message, { code = null } = {}) {
      if (!banner) return;
      text.textContent = message;
      if (code) banner.dataset.code = code;
      else delete banner.dataset.code;
      banner.hidden = false;
    },
    clear() {
      if (!banner) return;
      text.textContent = "";
      delete banner.dataset.code;
      banner.hidden = true;
    },
  };
  if (dismiss) dismiss.addEventListener("click", () => api.clear());
  return api;
}

// ------------------------------------------------------------------ metrics panel

function formatNumber(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return v.toLocaleString();
  return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(1) : v.toFixed(3);
}

/** Flatten the numeric / short-string leaves of an object to [["a.b", value], ...] (two levels deep). */
function flatten(obj, prefix = "", depth = 0, out = []) {
  for (const [k, v] of Object.entries(obj || {})) {
    if (["type", "event_id", "session_ms"].includes(k) && depth === 0) continue;
    const key = prefix ? `${prefix}.${k}` : k;
    if (typeof v === "number" || typeof v === "boolean") out.push([key, v]);
    else if (typeof v === "string" && v.length <= 40) out.push([key, v]);
    else if (v && typeof v === "object" && !Array.isArray(v) && depth < 2) flatten(v, key, depth + 1, out);
  }
  return out;
}

function renderMetrics(dl, event, limit = 16) {
  if (!dl) return;
  const rows = flatten(event).slice(0, limit);
  dl.replaceChildren();
  for (const [k, v] of rows) {
    const dt = document.createElement("dt");
    dt.textContent = k.replace(/_/g, " ");
    const dd = document.createElement("dd");
    dd.textContent = typeof v === "number" ? formatNumber(v) : String(v);
    dd.dataset.key = k;
    dl.append(dt, dd);
  }
  if (typeof event.session_ms === "number") {
    const dt = document.createElement("dt");
    dt.textContent = "session time";
    const dd = document.createElement("dd");
    dd.textContent = `${(event.session_ms / 1000).toFixed(1)} s`;
    dl.prepend(dt, dd);
  }
}

function renderEngines(el, session) {
  if (!el) return;
  el.replaceChildren();
  const engines = session && session.engines;
  if (!engines) return;
  const entries = Array.isArray(engines) ? engines.map((e, i) => [String(i), e]) : Object.entries(engines);
  for (const [kind, value] of entries) {
    const chip = document.createElement("span");
    chip.className = "chip";
    const label = typeof value === "string" ? value
      : value && typeof value === "object" ? (value.name || value.model || value.engine || JSON.stringify(value))
        : String(value);
    chip.textContent = Array.isArray(engines) ? label : `${kind}: ${label}`;
    el.append(chip);
  }
}

// ------------------------------------------------------------------ navigation

function markActiveNav(appName) {
  for (const a of document.querySelectorAll("[data-nav-app]")) {
    if (a.dataset.navApp === appName) a.setAttribute("aria-current", "page");
  }
}

// ------------------------------------------------------------------ main

async function main() {
  const config = readConfig();
  const app = config.app || "";
  markActiveNav(app);

  const connectBtn = $("connect");
  if (!app || !connectBtn) {
    // The index page (no session controls).
    window.rtcAgent = { client: null, config, state: () => ({ connection: "idle", app: null }) };
    return;
  }

  const errors = makeErrorBanner();
  const log = new EventLog($("event-log"), { limit: 200, heartbeatToggle: $("log-heartbeats") });
  const stateEl = $("connection-state");
  const sessionEl = $("session-id");
  const rttEl = $("rtt");
  const disconnectBtn = $("disconnect");
  const remoteAudio = $("remote-audio");
  const inputMeter = new LevelMeter($("input-level"));
  const outputMeter = new LevelMeter($("output-level"));
  const devices = new DeviceManager({
    micSelect: $("mic-select"),
    cameraSelect: $("camera-select"),
    processingToggle: $("audio-processing"),
    video: Boolean(config.media && config.media.video),
  });
  const client = new RtcClient({
    app,
    heartbeatIntervalMs: Number(config.heartbeat_interval_ms) || 2000,
    sessionConfig: config.session_config || {},
  });

  const logClear = $("log-clear");
  if (logClear) logClear.addEventListener("click", () => log.clear());

  // Local previews: any <video data-local-preview> shows the camera.
  const previews = [...document.querySelectorAll("video[data-local-preview]")];
  devices.addEventListener("change", (ev) => {
    const { stream, videoTrack } = ev.detail;
    for (const v of previews) {
      v.srcObject = videoTrack ? stream : null;
      v.closest("[data-has-video]")?.setAttribute("data-has-video", videoTrack ? "true" : "false");
    }
    if (ev.detail.audioTrack) inputMeter.attach(stream);
    else inputMeter.detach();
  });
  devices.addEventListener("warning", (ev) => {
    log.note(ev.detail.message, "warn");
    errors.show(ev.detail.message);
  });
  devices.refresh().catch(() => {});

  // ---------------------------------------------------------------- state display
  const setButtons = () => {
    const s = client.state;
    const busy = s === "connecting" || s === "connected" || (s === "disconnected" && client.pc);
    connectBtn.disabled = Boolean(busy);
    if (disconnectBtn) disconnectBtn.disabled = !busy;
  };
  const renderState = (s) => {
    if (stateEl) {
      stateEl.textContent = s;
      stateEl.dataset.state = s;
    }
    document.body.dataset.connection = s;
    setButtons();
  };
  renderState(client.state);

  client.addEventListener("statechange", (ev) => {
    const { state, previous } = ev.detail;
    renderState(state);
    log.note(`state: ${previous} → ${state}`, state === "failed" ? "error" : "info");
    if (state === "connected") errors.clear();
    if ((state === "disconnected" && !client.pc) || state === "failed") {
      // The session is over: release the mic / camera and stop the meters (peak values stay readable).
      devices.close();
      outputMeter.detach();
      if (remoteAudio) remoteAudio.srcObject = null;
    }
  });
  client.addEventListener("session", (ev) => {
    if (sessionEl) {
      sessionEl.textContent = ev.detail.sessionId || "—";
      sessionEl.title = ev.detail.sessionId || "";
    }
    log.note(`session ${ev.detail.sessionId}`);
  });
  client.addEventListener("rtt", (ev) => {
    const { last, avg } = ev.detail;
    if (!rttEl) return;
    rttEl.textContent = `${Math.round(last)} ms (avg ${Math.round(avg)} ms)`;
    rttEl.dataset.last = last.toFixed(1);
    rttEl.dataset.avg = avg.toFixed(1);
  });
  client.addEventListener("track", (ev) => {
    const { stream } = ev.detail;
    if (remoteAudio) {
      remoteAudio.srcObject = stream;
      const p = remoteAudio.play();
      if (p && p.catch) {
        p.catch((err) => log.note(`remote audio autoplay blocked: ${err.message}`, "warn"));
      }
    }
    outputMeter.attach(stream);
    log.note(`remote ${ev.detail.track.kind} track`);
  });
  client.addEventListener("error", (ev) => {
    const { error, fromServer } = ev.detail;
    const prefix = fromServer ? "Server error" : "Error";
    const code = error.code ? ` [${error.code}]` : "";
    errors.show(`${prefix}: ${error.message}`, { code: error.code });
    log.note(`${error.message}${code}`, "error");
  });
  client.addEventListener("log", (ev) => {
    if (ev.detail.level === "debug") log.add("sys", "debug", ev.detail.message, "debug");
    else log.note(ev.detail.message, ev.detail.level);
  });
  client.addEventListener("sent", (ev) => log.event("out", ev.detail));
  client.on("*", (event) => log.event("in", event));
  client.on("session.created", (event) => renderEngines($("session-engines"), event.session));
  client.on("metrics", (event) => renderMetrics($("metrics"), event));

  // ---------------------------------------------------------------- app module
  const ctx = { client, config, log, devices, meters: { input: inputMeter, output: outputMeter }, errors, $ };
  let appModule = null;
  try {
    const mod = await import(`./apps/${encodeURIComponent(app)}.js`);
    appModule = (mod.mount ? mod.mount(ctx) : null) || {};
    document.body.dataset.appModule = "mounted";
  } catch (err) {
    console.warn(`no app module for ${app}`, err);
    document.body.dataset.appModule = "failed";
    appModule = {};
  }

  // ---------------------------------------------------------------- connect / disconnect
  async function connect() {
    errors.clear();
    audioContext(); // created inside the click so autoplay policies allow it
    inputMeter.reset();
    outputMeter.reset();
    if (sessionEl) sessionEl.textContent = "—";
    if (rttEl) {
      rttEl.textContent = "—";
      delete rttEl.dataset.last;
      delete rttEl.dataset.avg;
    }
    connectBtn.disabled = true;
    let media;
    try {
      media = await devices.open();
    } catch (err) {
      errors.show(err.message);
      log.note(err.message, "error");
      setButtons();
      return;
    }
    let sessionConfig = { ...(config.session_config || {}) };
    if (typeof appModule.configure === "function") sessionConfig = appModule.configure(sessionConfig) || sessionConfig;
    try {
      await client.connect({ ...media, config: sessionConfig });
    } catch (err) {
      // Already reported through the client's "error" event; make sure the capture is released.
      if (client.state !== "connecting" && client.state !== "connected") devices.close();
    }
  }

  async function disconnect() {
    await client.disconnect();
  }

  connectBtn.addEventListener("click", () => connect());
  if (disconnectBtn) disconnectBtn.addEventListener("click", () => disconnect());

  const onDeviceChange = async (kind) => {
    if (!devices.hasPermission || !(client.state === "connected" || client.state === "connecting")) return;
    try {
      const track = await devices.switch(kind);
      await client.replaceTrack(kind, track);
      log.note(`switched ${kind === "audio" ? "microphone" : "camera"}: ${track.label}`);
    } catch (err) {
      errors.show(err.message);
      log.note(err.message, "error");
    }
  };
  $("mic-select")?.addEventListener("change", () => onDeviceChange("audio"));
  $("camera-select")?.addEventListener("change", () => onDeviceChange("video"));
  $("audio-processing")?.addEventListener("change", () => onDeviceChange("audio"));

  // End the session when the page goes away; keepalive lets the DELETE outlive the page.
  const endOnUnload = () => {
    if (client.pc || client.state === "connecting") client.disconnect({ keepalive: true });
  };
  window.addEventListener("pagehide", endOnUnload);
  window.addEventListener("beforeunload", endOnUnload);

  window.rtcAgent = {
    client,
    config,
    devices,
    log,
    meters: { input: inputMeter, output: outputMeter },
    app: appModule,
    connect,
    disconnect,
    state() {
      return {
        connection: stateEl ? stateEl.textContent : client.state,
        ...client.snapshot(),
        input: { level: inputMeter.level, peak: inputMeter.peak },
        output: { level: outputMeter.level, peak: outputMeter.peak },
        logLines: log.element ? log.element.childElementCount : 0,
      };
    },
  };
  document.body.dataset.ready = "true";
}

main().catch((err) => {
  console.error(err);
  const banner = $("error");
  const text = $("error-message") || banner;
  if (banner) {
    text.textContent = `The page failed to start: ${err.message}`;
    banner.hidden = false;
  }
});
