// Call: a room of up to six people. Media between people goes browser to browser (mesh.js, signaling relayed
// by the server as room.signal); this page's own session with the server carries the microphone up (captions
// of my speech for everyone, interpretation for listeners of other languages) and interpretation speech down
// (played by page.js on #remote-audio). Events: DESIGN.md section 4, "Calls".
//
// A join link is /call?room=NAME#join=rj_...: the fragment's join token is exchanged for this participant's
// single-use client token (POST /v1/tokens with Authorization: Bearer rj_...), so people without an API key or
// page sign-in can join that room, and only that room, until the link expires.

import { el, stickToEnd, trimChildren } from "../dom.js";
import { audioContext } from "../meters.js";
import { Mesh } from "../mesh.js";
import { AgentError } from "../rtc-client.js";

const MAX_LINES = 500;
const DUCK_VOLUME = 0.15; // the original voice under the interpretation, as interpreters' booths do
const SPEAKING_RMS = 0.015;
const RECONNECT_DELAYS_S = [1, 2, 4, 8, 15, 30];
const RECONNECT_REASONS = new Set(["server_shutdown", "heartbeat_lost", "internal_error", "ice_failed", "peer_closed"]);

const store = {
  get(key, fallback) {
    try {
      return localStorage.getItem(`rtc-agent.call.${key}`) ?? fallback;
    } catch {
      return fallback;
    }
  },
  set(key, value) {
    try {
      localStorage.setItem(`rtc-agent.call.${key}`, value);
    } catch {
      /* private mode */
    }
  },
};

function randomRoom() {
  const bytes = new Uint8Array(5);
  crypto.getRandomValues(bytes);
  return `room-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function clock(date = new Date()) {
  return date.toTimeString().slice(0, 8);
}

function baseLanguage(code) {
  return String(code || "").split("-")[0].toLowerCase();
}

function pickOption(select, value) {
  if (select && [...select.options].some((o) => o.value === value)) select.value = value;
}

export function mount({ client, log, devices, errors, $ }) {
  // ------------------------------------------------------------ room, link, identity
  const params = new URLSearchParams(location.search);
  const room = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/.test(params.get("room") || "") ? params.get("room") : randomRoom();
  const joinToken = new URLSearchParams(location.hash.slice(1)).get("join");
  if (params.get("room") !== room) {
    params.set("room", room);
    history.replaceState(null, "", `${location.pathname}?${params}${location.hash}`);
  }
  $("room-name").textContent = room;
  document.body.dataset.room = room;

  const nameInput = $("call-name");
  const speakSelect = $("speak-language");
  const listenSelect = $("listen-language");
  const interpretBox = $("hear-interpretation");
  const browserLanguage = baseLanguage(navigator.language || "en");
  nameInput.value = params.get("name") || store.get("name", "");
  pickOption(speakSelect, params.get("speak") || store.get("speak", browserLanguage));
  pickOption(listenSelect, params.get("hear") || store.get("hear", browserLanguage));
  if (!listenSelect.value) listenSelect.value = "en";

  // This participant's client token names the room (the call app's config needs it); with a join link, the
  // link's token pays for it (no sign-in needed), otherwise the page sign-in cookie or open mode does.
  client.fetchClientToken = async () => {
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    if (joinToken) headers.Authorization = `Bearer ${joinToken}`;
    const res = await fetch("/v1/tokens", {
      method: "POST",
      credentials: "same-origin",
      headers,
      body: JSON.stringify({ app: "call", config: { room } }),
    });
    if (!res.ok) {
      const body = await res.json().catch(() => ({}));
      const what = joinToken ? "The join link was refused" : "No client token";
      const error = body.error || {};
      throw new AgentError(`${what}: ${error.message || `HTTP ${res.status}`}`, {
        type: error.type || "http_error", code: error.code || `http_${res.status}`, status: res.status,
      });
    }
    return (await res.json()).value;
  };

  // ------------------------------------------------------------ local media: audio to the server, all to the mesh
  let local = { stream: null, audioTrack: null, videoTrack: null };
  let mesh = null;
  const originalConnect = client.connect.bind(client);
  client.connect = (options = {}) => {
    local = { stream: options.stream || null, audioTrack: options.audioTrack || null, videoTrack: options.videoTrack || null };
    const audioOnly = local.audioTrack ? new MediaStream([local.audioTrack]) : null;
    return originalConnect({ ...options, videoTrack: null, stream: audioOnly });
  };
  const originalReplace = client.replaceTrack.bind(client);
  client.replaceTrack = async (kind, track) => {
    if (kind === "audio") local.audioTrack = track;
    else local.videoTrack = track;
    if (mesh) await mesh.replaceTrack(kind, track);
    return kind === "audio" ? originalReplace(kind, track) : true;
  };
  devices.addEventListener("change", (ev) => {
    const { stream, audioTrack, videoTrack } = ev.detail;
    local = { stream, audioTrack, videoTrack };
    watchLevel("self", audioTrack ? stream : null);
  });

  // ------------------------------------------------------------ tiles
  const tilesEl = $("tiles");
  const selfTile = $("tile-self");
  const tiles = new Map(); // participant id -> {el, video, info}
  const interpreted = new Set(); // speakers whose interpretation this page has received
  let myId = null;
  let participants = new Map();

  const tileFor = (id) => (id && id === myId ? selfTile : tiles.get(id)?.el || null);

  const renderCount = () => {
    const n = tiles.size + 1;
    tilesEl.dataset.count = String(n);
    const count = $("room-count");
    count.dataset.count = myId ? String(n) : "0";
    count.textContent = myId ? `${n} in the call` : "";
  };

  const renderFlags = (tile, info) => {
    const flags = [];
    if (info.language && info.language !== "auto") flags.push(info.language);
    if (info.mic_muted) flags.push("muted");
    tile.querySelector(".tile-flags").textContent = flags.join(" · ");
    tile.dataset.cameraMuted = info.camera_muted ? "true" : "false";
    tile.dataset.micMuted = info.mic_muted ? "true" : "false";
  };

  const applyDucking = () => {
    for (const [id, { el: tile, video }] of tiles) {
      const ducked = interpretBox.checked && interpreted.has(id);
      video.volume = ducked ? DUCK_VOLUME : 1.0;
      tile.dataset.ducked = ducked ? "true" : "false";
    }
  };

  const addTile = (info) => {
    let entry = tiles.get(info.participant_id);
    if (!entry) {
      const tile = el("figure", "tile remote");
      tile.dataset.participantId = info.participant_id;
      tile.dataset.speaking = "false";
      const video = el("video");
      video.autoplay = true;
      video.playsInline = true;
      const name = el("figcaption", "tile-name");
      name.append(el("span", "speaking-dot"), el("span", "name"), el("span", "tile-flags"));
      const caption = el("div", "tile-caption");
      caption.setAttribute("aria-live", "polite");
      caption.append(el("span", "final"), document.createTextNode(" "), el("span", "partial"), el("div", "translation"));
      tile.append(video, name, caption);
      tilesEl.append(tile);
      entry = { el: tile, video, info };
      tiles.set(info.participant_id, entry);
    }
    entry.info = info;
    entry.el.querySelector(".name").textContent = info.name;
    renderFlags(entry.el, info);
    renderCount();
    return entry;
  };

  const removeTile = (id) => {
    const entry = tiles.get(id);
    if (!entry) return;
    watchLevel(id, null);
    entry.video.srcObject = null;
    entry.el.remove();
    tiles.delete(id);
    interpreted.delete(id);
    renderCount();
  };

  const clearRoom = () => {
    if (mesh) mesh.closeAll();
    mesh = null;
    for (const id of [...tiles.keys()]) removeTile(id);
    participants = new Map();
    myId = null;
    selfTile.dataset.participantId = "";
    renderCount();
  };

  // ------------------------------------------------------------ speaking indicators (WebAudio levels)
  const levels = new Map(); // id -> {source, analyser, buffer, lastLoud}
  function watchLevel(id, stream) {
    const old = levels.get(id);
    if (old) {
      old.source.disconnect();
      levels.delete(id);
    }
    const ctx = stream && stream.getAudioTracks().length ? audioContext() : null;
    if (!ctx) return;
    const source = ctx.createMediaStreamSource(stream);
    const analyser = ctx.createAnalyser();
    analyser.fftSize = 1024;
    source.connect(analyser);
    levels.set(id, { source, analyser, buffer: new Float32Array(analyser.fftSize), lastLoud: 0 });
  }
  setInterval(() => {
    const now = performance.now();
    for (const [id, meter] of levels) {
      meter.analyser.getFloatTimeDomainData(meter.buffer);
      let sum = 0;
      for (const v of meter.buffer) sum += v * v;
      const rms = Math.sqrt(sum / meter.buffer.length);
      if (rms > SPEAKING_RMS) meter.lastLoud = now;
      const tile = id === "self" ? selfTile : tiles.get(id)?.el;
      if (tile) tile.dataset.speaking = now - meter.lastLoud < 400 ? "true" : "false";
    }
  }, 120);

  // ------------------------------------------------------------ transcript
  const transcript = $("room-transcript");
  const lineFor = (speaker, segmentId, create = true) => {
    const key = `${speaker.participant_id}:${segmentId}`;
    let li = transcript.querySelector(`li[data-key="${CSS.escape(key)}"]`);
    if (!li && create) {
      li = el("li", "segment partial");
      li.dataset.key = key;
      li.dataset.speaker = speaker.participant_id;
      const body = el("span", "segment-text");
      body.append(el("span", "text"), el("span", "tr"));
      li.append(el("span", "segment-time", clock()), el("span", "who", speaker.name), body);
      stickToEnd(transcript, () => transcript.append(li));
      trimChildren(transcript, MAX_LINES);
    }
    return li;
  };

  // ------------------------------------------------------------ server events
  client.on("room.joined", async (ev) => {
    clearRoom();
    myId = ev.participant_id;
    selfTile.dataset.participantId = myId;
    participants = new Map(ev.participants.map((p) => [p.participant_id, p]));
    for (const p of ev.participants) {
      if (p.participant_id === myId) renderFlags(selfTile, p);
      else addTile(p);
    }
    renderCount();
    let rtcConfig = { iceServers: [] };
    try {
      rtcConfig = await client.fetchIceServers(joinToken || null);
    } catch (err) {
      log.note(`ICE servers unavailable for the mesh: ${err.message}`, "warn");
    }
    if (myId !== ev.participant_id) return; // left or rejoined meanwhile
    mesh = new Mesh({
      selfId: myId,
      rtcConfig,
      stream: local.stream,
      signal: (to, kind, payload) => client.send({ type: "room.signal", to, kind, payload }),
    });
    mesh.addEventListener("track", ({ detail }) => {
      const entry = tiles.get(detail.id) || addTile(participants.get(detail.id) || { participant_id: detail.id, name: "?" });
      if (entry.video.srcObject !== detail.stream) entry.video.srcObject = detail.stream;
      entry.video.play().catch((err) => log.note(`remote media autoplay blocked: ${err.message}`, "warn"));
      if (detail.track.kind === "audio") watchLevel(detail.id, detail.stream);
      applyDucking();
    });
    mesh.addEventListener("state", ({ detail }) => {
      const entry = tiles.get(detail.id);
      if (entry) entry.el.dataset.connection = detail.state;
    });
    // The newcomer connects to everyone already here; they answer.
    for (const id of participants.keys()) if (id !== myId) mesh.connect(id);
    for (const pending of earlySignals.splice(0)) mesh.handleSignal(pending.from, pending.kind, pending.payload);
  });

  const earlySignals = []; // signals that arrive before the mesh exists (ICE servers still loading)
  client.on("room.signal", (ev) => {
    if (mesh) mesh.handleSignal(ev.from, ev.kind, ev.payload);
    else earlySignals.push(ev);
  });

  client.on("room.participant.joined", (ev) => {
    participants.set(ev.participant.participant_id, ev.participant);
    addTile(ev.participant);
    log.note(`${ev.participant.name} joined`);
  });

  client.on("room.participant.left", (ev) => {
    participants.delete(ev.participant_id);
    if (mesh) mesh.close(ev.participant_id);
    removeTile(ev.participant_id);
    log.note(`${ev.name} left${ev.reason ? ` (${ev.reason})` : ""}`);
  });

  client.on("room.participant.updated", (ev) => {
    const info = ev.participant;
    const before = participants.get(info.participant_id);
    participants.set(info.participant_id, info);
    // A speaker who now speaks another language has a new interpretation (or none): its voice stays at full
    // volume until that interpretation speaks.
    if (before && before.language !== info.language && interpreted.delete(info.participant_id)) applyDucking();
    if (info.participant_id === myId) renderFlags(selfTile, info);
    else if (tiles.has(info.participant_id)) addTile(info);
  });

  const showCaption = (ev, final) => {
    const speaker = ev.speaker || { participant_id: myId, name: "You" };
    const tile = tileFor(speaker.participant_id);
    if (tile) {
      const box = tile.querySelector(".tile-caption");
      if (final) {
        box.querySelector(".final").textContent = ev.text;
        box.querySelector(".partial").textContent = "";
      } else {
        box.querySelector(".partial").textContent = [ev.committed, ev.tentative].filter(Boolean).join(" ");
      }
    }
    const li = lineFor(speaker, ev.segment_id);
    li.querySelector(".text").textContent = final ? ev.text : [ev.committed, ev.tentative].filter(Boolean).join(" ");
    if (final) li.classList.replace("partial", "final");
  };
  client.on("caption.partial", (ev) => showCaption(ev, false));
  client.on("caption.final", (ev) => {
    if (!ev.text || !ev.text.trim()) return;
    showCaption(ev, true);
  });
  client.on("caption.translation", (ev) => {
    const tile = tileFor(ev.speaker.participant_id);
    if (tile) {
      const line = tile.querySelector(".translation");
      line.textContent = line.dataset.segment === ev.segment_id ? `${line.textContent} ${ev.text}` : ev.text;
      line.dataset.segment = ev.segment_id;
    }
    const li = lineFor(ev.speaker, ev.segment_id);
    const tr = li.querySelector(".tr");
    tr.textContent = `${tr.textContent ? `${tr.textContent} ` : ""}${ev.text}`;
    tr.lang = ev.language;
  });
  client.on("translation.chunk", (ev) => {
    if (ev.speaker && ev.action === "EMIT" && !interpreted.has(ev.speaker.participant_id)) {
      interpreted.add(ev.speaker.participant_id);
      applyDucking();
    }
  });

  // ------------------------------------------------------------ controls
  const joinBtn = $("join");
  const leaveBtn = $("leave");
  const micBtn = $("mute-mic");
  const camBtn = $("mute-camera");
  const reconnectEl = $("reconnect-state");
  let userLeft = true;
  let reconnectAttempt = 0;
  let reconnectTimer = null;

  const renderControls = () => {
    const s = client.state;
    const live = s === "connected" || s === "connecting" || reconnectTimer !== null;
    joinBtn.disabled = live;
    leaveBtn.disabled = !live;
    micBtn.disabled = s !== "connected";
    camBtn.disabled = s !== "connected" || !local.videoTrack;
  };

  const update = (settings) => {
    if (client.state === "connected") client.send({ type: "session.update", session: settings });
  };

  const join = async () => {
    userLeft = false;
    errors.clear();
    const connect = window.rtcAgent && window.rtcAgent.connect;
    if (connect) await connect();
  };
  joinBtn.addEventListener("click", () => join());
  leaveBtn.addEventListener("click", async () => {
    userLeft = true;
    clearTimeout(reconnectTimer);
    reconnectTimer = null;
    reconnectEl.hidden = true;
    await client.disconnect();
    clearRoom();
    renderControls();
  });
  micBtn.addEventListener("click", () => {
    const muted = micBtn.getAttribute("aria-pressed") !== "true";
    if (local.audioTrack) local.audioTrack.enabled = !muted;
    micBtn.setAttribute("aria-pressed", String(muted));
    micBtn.textContent = muted ? "Unmute mic" : "Mute mic";
    update({ mic_muted: muted });
  });
  camBtn.addEventListener("click", () => {
    const off = camBtn.getAttribute("aria-pressed") !== "true";
    if (local.videoTrack) local.videoTrack.enabled = !off;
    camBtn.setAttribute("aria-pressed", String(off));
    camBtn.textContent = off ? "Camera on" : "Camera off";
    selfTile.dataset.cameraMuted = String(off);
    update({ camera_muted: off });
  });
  speakSelect.addEventListener("change", () => {
    store.set("speak", speakSelect.value);
    update({ language: speakSelect.value });
  });
  listenSelect.addEventListener("change", () => {
    store.set("hear", listenSelect.value);
    interpreted.clear();
    applyDucking();
    update({ listen_language: listenSelect.value });
  });
  interpretBox.addEventListener("change", () => {
    applyDucking();
    update({ interpret: interpretBox.checked });
  });
  nameInput.addEventListener("change", () => {
    store.set("name", nameInput.value.trim());
    update({ name: nameInput.value.trim() || "Guest" });
  });

  // ------------------------------------------------------------ link and downloads
  const shareInput = $("share-link");
  const shareLink = async () => {
    if (joinToken) return `${location.origin}/call?room=${encodeURIComponent(room)}#join=${encodeURIComponent(joinToken)}`;
    try {
      const res = await fetch("/v1/rooms", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify({ room }),
      });
      if (res.ok) return `${location.origin}${(await res.json()).url}`;
    } catch {
      /* fall back to the plain link */
    }
    return `${location.origin}/call?room=${encodeURIComponent(room)}`;
  };
  $("copy-link").addEventListener("click", async () => {
    const link = await shareLink();
    shareInput.value = link;
    shareInput.hidden = false;
    shareInput.select();
    try {
      await navigator.clipboard.writeText(link);
      log.note("join link copied");
    } catch {
      log.note("copy the selected join link", "warn");
    }
  });

  const download = async (fmt) => {
    const headers = joinToken ? { Authorization: `Bearer ${joinToken}` } : {};
    const res = await fetch(`/v1/rooms/${encodeURIComponent(room)}/transcript.${fmt}`, { headers, credentials: "same-origin" });
    if (!res.ok) {
      errors.show(res.status === 404 ? "No transcript yet for this room." : `Download failed (${res.status})`);
      return;
    }
    const url = URL.createObjectURL(await res.blob());
    const a = el("a");
    a.href = url;
    a.download = `${room}.${fmt}`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  $("download-vtt").addEventListener("click", () => download("vtt"));
  $("download-json").addEventListener("click", () => download("json"));

  // ------------------------------------------------------------ reconnect when the server goes away for a moment
  const scheduleReconnect = (why) => {
    if (userLeft || reconnectTimer !== null) return;
    const delay = RECONNECT_DELAYS_S[Math.min(reconnectAttempt, RECONNECT_DELAYS_S.length - 1)];
    reconnectAttempt += 1;
    reconnectEl.hidden = false;
    reconnectEl.textContent = `reconnecting in ${delay} s`;
    log.note(`${why}: reconnecting in ${delay} s`, "warn");
    reconnectTimer = setTimeout(async () => {
      reconnectTimer = null;
      reconnectEl.textContent = "reconnecting…";
      await join();
    }, delay * 1000);
    renderControls();
  };
  client.addEventListener("ended", (ev) => {
    clearRoom();
    if (RECONNECT_REASONS.has(ev.detail.reason)) scheduleReconnect(`session ended (${ev.detail.reason})`);
  });
  client.addEventListener("statechange", (ev) => {
    const { state } = ev.detail;
    if (state === "connected") {
      userLeft = false; // also when joined with the session card's Connect button
      reconnectAttempt = 0;
      reconnectEl.hidden = true;
    }
    if (state === "failed" || (state === "disconnected" && !client.pc)) {
      clearRoom();
      const status = client.lastError && client.lastError.status;
      // A refusal (bad config, full room, expired link) is final; a server away or a network fault is retried.
      if (state === "failed" && (!status || status >= 500)) scheduleReconnect("connection failed");
    }
    renderControls();
  });
  renderControls();

  return {
    configure(config) {
      store.set("name", nameInput.value.trim());
      return {
        ...config,
        room,
        name: nameInput.value.trim() || "Guest",
        language: speakSelect.value,
        listen_language: listenSelect.value,
        captions: true,
        interpret: interpretBox.checked,
      };
    },
    room: () => room,
    participantId: () => myId,
    participants: () => [...participants.values()],
    join,
    /** For tests and readouts: per remote tile, its name, caption text and media numbers. */
    async stats() {
      const peers = mesh ? await mesh.stats() : {};
      return [...tiles.entries()].map(([id, { el: tile, video, info }]) => ({
        id,
        name: info.name,
        caption: tile.querySelector(".tile-caption").textContent,
        speaking: tile.dataset.speaking === "true",
        ducked: tile.dataset.ducked === "true",
        volume: video.volume,
        muted: video.muted,
        paused: video.paused,
        currentTime: video.currentTime,
        videoWidth: video.videoWidth,
        frames: video.getVideoPlaybackQuality ? video.getVideoPlaybackQuality().totalVideoFrames : 0,
        // No browser-to-browser connection to this participant (yet): the numbers read zero.
        ...{ state: "none", framesDecoded: 0, audioEnergy: 0, audioBytes: 0 },
        ...(peers[id] || {}),
      }));
    },
  };
}
