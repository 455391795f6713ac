// Page controller shared by every page: reads #client-config, wires the session controls of base.html to an
// RtcClient, and loads the app's own module (static/js/apps/<app>.js) when the page has one.
//
// Debug / test handle: window.rtcAgent = {client, state(), connect(), disconnect(), ...}.

import { RtcClient } from "./rtc-client.js";
import { DeviceManager } from "./devices.js";
import { EventLog } from "./event-log.js";
import { LevelMeter, audioContext } from "./meters.js";
import { MediaToggles } from "./media-toggles.js";

const $ = (id) => document.getElementById(id);

/** Server error codes of a passing engine fault: their banner clears with the next good result (GOOD_EVENT). */
const TRANSIENT_ERROR_CODES = new Set(["engine_timeout", "engine_error", "engine_overloaded", "engine_capacity",
  "asr_timeout", "captions_dropped", "server_busy"]);
const GOOD_EVENT = /^(caption\.(partial|final)|translation\.(chunk|speech\.started)|response\.(output_|done)|conversation\.item\.input_audio_transcription\.completed|vision\.)/;

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

function renderMetrics(dl, event, limit = 16, { video = true } = {}) {
  if (!dl) return;
  // counters relevant to the page only: no video counters where no camera is sent
  const rows = flatten(event).filter(([k]) => video || !/video|frame|vision/i.test(k)).slice(0, limit);
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

// ------------------------------------------------------------------ downloads, copy

/** Save `text` as a file called `name` (a Blob and a temporary link). */
export function download(name, text, type = "text/plain") {
  const blob = new Blob([text], { type: `${type};charset=utf-8` });
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  a.rel = "noopener";
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** Copy `text` to the clipboard and say "Copied" on `button` for 1.5 s (or why it failed). */
export async function copyText(text, button = null) {
  let ok = true;
  try {
    await navigator.clipboard.writeText(text);
  } catch (err) {
    ok = false;
  }
  if (button) {
    const label = button.dataset.label || button.textContent;
    button.dataset.label = label;
    button.textContent = ok ? "Copied" : "Copy failed";
    button.dataset.copied = String(ok);
    setTimeout(() => {
      button.textContent = label;
      delete button.dataset.copied;
    }, 1500);
  }
  return ok;
}

/** Milliseconds as a WebVTT (".") or SRT (",") timestamp. */
export function timestamp(ms, sep = ".") {
  const t = Math.max(0, Math.round(ms || 0));
  const h = String(Math.floor(t / 3600000)).padStart(2, "0");
  const m = String(Math.floor((t % 3600000) / 60000)).padStart(2, "0");
  const s = String(Math.floor((t % 60000) / 1000)).padStart(2, "0");
  return `${h}:${m}:${s}${sep}${String(t % 1000).padStart(3, "0")}`;
}

/** Cues [{start_ms, end_ms, text}] as WebVTT. */
export function toVtt(cues) {
  const body = cues.map((c) => `${timestamp(c.start_ms)} --> ${timestamp(Math.max(c.end_ms, c.start_ms + 1))}\n${c.text}`);
  return `WEBVTT\n\n${body.join("\n\n")}\n`;
}

/** Cues [{start_ms, end_ms, text}] as SRT. */
export function toSrt(cues) {
  return cues.map((c, i) => `${i + 1}\n${timestamp(c.start_ms, ",")} --> `
    + `${timestamp(Math.max(c.end_ms, c.start_ms + 1), ",")}\n${c.text}\n`).join("\n");
}

// ------------------------------------------------------------------ readiness, quality

const ENGINE_WORDS = { llm: "the language model", asr: "the speech recognizer", tts: "the voice", vad: "the voice detector",
  st: "the translator", vlm: "the vision model" };

const sentence = (text) => (/[.!?…]$/.test(text) ? text : `${text}.`);

/** The readiness note of `app` from /health's (or client_config's) readiness object, one sentence per state
 * (loading, with each engine's load percentage when the server reports one; failed, with its reason); null when
 * ready. */
export function readinessText(readiness, app) {
  if (!readiness || !readiness.apps || !readiness.apps[app]) return null;
  const entry = readiness.apps[app];
  if (entry.ready) return null;
  const loading = [];
  const failed = [];
  for (const name of entry.waiting || []) {
    const e = (readiness.engines || {})[name] || {};
    const what = ENGINE_WORDS[name] || e.label || name;
    if (e.state === "failed") failed.push(`${what} (${String(e.progress || "see the server log").replace(/[.\s]+$/, "")})`);
    else loading.push(typeof e.percent === "number" ? `${what} (${e.percent} %)` : what);
  }
  const list = (names) => (names.length > 1 ? `${names.slice(0, -1).join(", ")} and ${names.at(-1)}` : names[0]);
  const parts = [];
  if (loading.length) {
    parts.push(sentence(`Loading ${list(loading)}: you can connect now, the first answer waits for `
      + `${loading.length > 1 ? "them" : "it"}`));
  }
  if (failed.length) parts.push(sentence(`Could not load ${list(failed)}`));
  return parts.length ? parts.join(" ") : null;
}

/** Connection quality from RTCPeerConnection.getStats(): loss %, jitter ms, RTT ms, sending bitrate kbit/s. */
export async function connectionQuality(pc, previous = null) {
  if (!pc || typeof pc.getStats !== "function") return null;
  const report = await pc.getStats();
  let loss = null;
  let jitter = null;
  let rtt = null;
  let bytes = 0;
  let at = 0;
  let lost = 0;
  let received = 0;
  report.forEach((r) => {
    if (r.type === "remote-inbound-rtp" && r.kind === "audio") {
      if (typeof r.fractionLost === "number") loss = 100 * r.fractionLost;
      if (typeof r.roundTripTime === "number") rtt = 1000 * r.roundTripTime;
    }
    if (r.type === "inbound-rtp" && r.kind === "audio") {
      if (typeof r.jitter === "number") jitter = 1000 * r.jitter;
      lost += r.packetsLost || 0;
      received += r.packetsReceived || 0;
    }
    if (r.type === "outbound-rtp") {
      bytes += r.bytesSent || 0;
      at = Math.max(at, r.timestamp || 0);
    }
    if (r.type === "candidate-pair" && r.nominated && typeof r.currentRoundTripTime === "number" && rtt === null) {
      rtt = 1000 * r.currentRoundTripTime;
    }
  });
  if (loss === null && lost + received > 0) loss = (100 * lost) / (lost + received);
  let kbps = null;
  if (previous && previous.at && at > previous.at) kbps = (8 * (bytes - previous.bytes)) / (at - previous.at);
  const bad = (loss ?? 0) > 5 || (jitter ?? 0) > 50 || (rtt ?? 0) > 400;
  const fair = (loss ?? 0) > 1 || (jitter ?? 0) > 20 || (rtt ?? 0) > 200;
  return { loss, jitter, rtt, kbps, bytes, at, grade: bad ? "poor" : fair ? "fair" : "good" };
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
  let appModule = null; // the app's module (static/js/apps/<app>.js), once mounted
  const log = new EventLog($("event-log"), {
    limit: 200, heartbeatToggle: $("log-heartbeats"), metricsToggle: $("log-metrics"), filterInput: $("log-filter"),
  });
  // Known at load: the browser gives no microphone to an insecure page.
  if (window.isSecureContext === false) {
    const warn = $("insecure-warning");
    if (warn) warn.hidden = false;
    document.body.dataset.insecure = "true";
  }
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
    if (/audio only/.test(ev.detail.message)) {
      document.body.dataset.audioOnly = "true";
      audioOnlyWarning = ev.detail.message;
    }
  });
  let audioOnlyWarning = null; // shown again once connected (connecting clears the banner)
  devices.refresh().catch(() => {});

  // ---------------------------------------------------------------- state display
  const needsSignIn = Boolean(config.auth && config.auth.required && !config.auth.signed_in);
  const setButtons = () => {
    const s = client.state;
    const busy = s === "connecting" || s === "connected" || (s === "disconnected" && client.pc);
    connectBtn.disabled = Boolean(busy) || needsSignIn;
    connectBtn.textContent = client.endReason || s === "failed" ? "Reconnect" : "Connect";
    if (disconnectBtn) disconnectBtn.disabled = !busy;
  };
  // An app may read the connection its own way (the call page: joined, reconnecting in N s): then the state badge
  // shows that reading ({text, state}) instead of the client's bare state, so the two never disagree.
  let connectionShown = null;
  const renderState = (s) => {
    if (stateEl) {
      stateEl.textContent = connectionShown ? connectionShown.text : s;
      stateEl.dataset.state = connectionShown ? connectionShown.state : s;
    }
    document.body.dataset.connection = s;
    setButtons();
  };
  renderState(client.state);

  client.addEventListener("statechange", (ev) => {
    const { state, previous } = ev.detail;
    renderState(state);
    log.note(`state: ${previous} → ${state}`, state === "failed" ? "error" : "info");
    if (state === "connected") {
      errors.clear();
      if (audioOnlyWarning) errors.show(audioOnlyWarning, { code: "audio_only" });
    }
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
    // an engine's passing fault clears with the next good result (transientBanner below)
    bannerTransient = Boolean(fromServer && TRANSIENT_ERROR_CODES.has(error.code));
    log.note(`${error.message}${code}`, "error");
  });
  let bannerTransient = false;
  client.on("*", (event) => {
    if (bannerTransient && GOOD_EVENT.test(event.type || "")) {
      bannerTransient = false;
      errors.clear();
    }
  });
  client.addEventListener("ended", (ev) => {
    // The server's last word before it closes the session: say why and offer Reconnect.
    const { reason, message } = ev.detail;
    document.body.dataset.endReason = reason;
    // an app that rejoins by itself says so in its own status (endedMessage returns null): no banner then
    const shown = typeof appModule?.endedMessage === "function" ? appModule.endedMessage(ev.detail) : undefined;
    if (shown !== null) errors.show(shown || `Session ended: ${message || reason}`, { code: reason });
    bannerTransient = false;
    log.note(`session ended: ${reason}${message ? ` (${message})` : ""}`, reason === "deleted" ? "info" : "warn");
    setButtons();
  });
  client.addEventListener("retry", (ev) => {
    log.note(`server busy, retry ${ev.detail.attempt} in ${ev.detail.waitS} s`, "warn");
  });
  client.addEventListener("log", (ev) => {
    if (ev.detail.level === "debug") log.add("sys", "debug", ev.detail.message, "debug");
    else log.note(ev.detail.message, ev.detail.level);
  });
  client.addEventListener("sent", (ev) => log.event("out", ev.detail));
  client.on("*", (event) => log.event("in", event));
  client.on("session.created", (event) => renderEngines($("session-engines"), event.session));
  client.on("metrics", (event) => renderMetrics($("metrics"), event, 16, {
    video: Boolean(config.media && config.media.video) && document.body.dataset.audioOnly !== "true",
  }));

  // ---------------------------------------------------------------- readiness (before Connect)
  const readinessEl = $("readiness");
  let readinessTimer = null;
  const showReadiness = (readiness) => {
    const text = readinessText(readiness, app);
    document.body.dataset.readiness = text ? "loading" : "ready";
    if (readinessEl) {
      readinessEl.hidden = !text;
      readinessEl.dataset.ready = text ? "false" : "true";
      readinessEl.textContent = text || "";
    }
    return !text;
  };
  const pollReadiness = async () => {
    readinessTimer = null;
    let ready = false;
    try {
      const resp = await fetch("/health", { cache: "no-store" });
      const body = await resp.json();
      ready = showReadiness({ apps: body.readiness?.apps, engines: body.readiness?.engines });
    } catch (err) {
      ready = false;
    }
    if (!ready) readinessTimer = setTimeout(pollReadiness, 1000);
  };
  if (!showReadiness(config.readiness)) readinessTimer = setTimeout(pollReadiness, 500);

  // ---------------------------------------------------------------- mute, camera (one state: media-toggles.js), quality
  const toggles = new MediaToggles({ devices });
  toggles.bind("mic", $("mute"));
  toggles.bind("camera", $("camera-toggle"));
  toggles.addEventListener("change", ({ detail }) => {
    if (detail.kind === "mic" && client.connected) client.send({ type: "input_audio.muted", muted: detail.value });
  });
  const setMuted = (value, source = "api") => toggles.set("mic", value, { source });
  const setCameraOff = (value, source = "api") => toggles.set("camera", value, { source });
  const qualityEl = $("quality");
  let qualityTimer = null;
  let qualityPrev = null;
  const renderQuality = (q) => {
    if (!qualityEl) return;
    if (!q) {
      qualityEl.dataset.quality = "none";
      qualityEl.textContent = "quality —";
      qualityEl.title = "Connection quality from the browser's WebRTC statistics";
      return;
    }
    const f = (v, unit, digits = 0) => (v === null || v === undefined ? "—" : `${v.toFixed(digits)} ${unit}`);
    qualityEl.dataset.quality = q.grade;
    qualityEl.textContent = `quality ${q.grade}`;
    qualityEl.title = `loss ${f(q.loss, "%", 1)}, jitter ${f(q.jitter, "ms")}, RTT ${f(q.rtt, "ms")}, `
      + `sending ${f(q.kbps, "kbit/s")}`;
    for (const k of ["loss", "jitter", "rtt", "kbps"]) {
      if (typeof q[k] === "number") qualityEl.dataset[k] = q[k].toFixed(1);
    }
  };
  const pollQuality = async () => {
    qualityTimer = null;
    if (!client.pc || client.state !== "connected") return;
    try {
      const q = await connectionQuality(client.pc, qualityPrev);
      if (q) {
        qualityPrev = q;
        renderQuality(q);
      }
    } catch (err) {
      /* stats are best effort */
    }
    qualityTimer = setTimeout(pollQuality, 2000);
  };
  const sessionControls = (live) => toggles.setLive(live);
  client.addEventListener("statechange", (ev) => {
    const { state } = ev.detail;
    if (state === "connected") {
      sessionControls(true);
      if (toggles.muted) client.send({ type: "input_audio.muted", muted: true });
      if (!qualityTimer) qualityTimer = setTimeout(pollQuality, 1000);
    }
    if ((state === "disconnected" && !client.pc) || state === "failed") {
      sessionControls(false);
      if (qualityTimer) clearTimeout(qualityTimer);
      qualityTimer = null;
      qualityPrev = null;
      renderQuality(null);
      // a page that rejoins by itself (the call page) keeps its mute state: nobody is heard unasked
      if (!appModule || !appModule.keepsMediaState) {
        setMuted(false, "session-end");
        setCameraOff(false, "session-end");
      }
      // every per-session indicator of the app goes back to its idle look (its text stays until cleared)
      if (appModule && typeof appModule.reset === "function") appModule.reset();
      document.body.dataset.sessionEnded = "true";
    }
  });
  document.addEventListener("keydown", (ev) => {
    if (!ev.altKey || ev.ctrlKey || ev.metaKey) return;
    const key = ev.key.toLowerCase();
    if (key === "c" && !connectBtn.disabled) {
      ev.preventDefault();
      connect();
    } else if (key === "m" && toggles.live) {
      ev.preventDefault();
      setMuted(!toggles.muted, "Alt+M");
    }
  });

  // ---------------------------------------------------------------- app module
  const ctx = {
    connect: () => connect(), // what Connect does (devices, the app's configure, the session)
    showConnection: (shown) => {
      connectionShown = shown && typeof shown.text === "string" ? shown : null;
      renderState(client.state);
    },
    client, config, log, devices, meters: { input: inputMeter, output: outputMeter }, errors, $,
    toggles, setMuted: (value, source) => setMuted(value, source), isMuted: () => toggles.muted, download, copyText,
    toVtt, toSrt,
    // the page's one polite live region: apps announce finished text only (never partials)
    announce: (text) => {
      const region = $("announcer");
      if (region) region.textContent = text ? String(text).slice(0, 500) : ""; // "" empties it (a repeat is read)
    },
  };
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
    delete document.body.dataset.endReason;
    delete document.body.dataset.sessionEnded;
    delete document.body.dataset.audioOnly;
    audioOnlyWarning = null;
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
      // tracks already open (a page's preview before joining) are used as they are; otherwise opened now
      const live = (t) => Boolean(t && t.readyState === "live");
      const ready = live(devices.audioTrack) && (!devices.video || devices.audioOnly || live(devices.videoTrack));
      const none = typeof appModule.wantsDevices === "function" && !appModule.wantsDevices(); // e.g. a webinar listener
      media = none ? { audioTrack: null, videoTrack: null, stream: null }
        : ready ? { audioTrack: devices.audioTrack, videoTrack: devices.videoTrack, stream: devices.stream }
          : await devices.open();
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
    // in a session the new track replaces the sent one; before it, a preview (the call's pre-join) follows too
    const live = client.state === "connected" || client.state === "connecting";
    const previewing = kind === "audio" ? devices.audioTrack : devices.videoTrack;
    if (!devices.hasPermission || !(live || previewing)) return;
    try {
      const track = await devices.switch(kind);
      if (live) await client.replaceTrack(kind, track);
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
    toggles,
    setMuted,
    setCameraOff,
    get muted() {
      return toggles.muted;
    },
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
