// Call: a room of up to six people. Media between people goes browser to browser (mesh.js, signaling relayed
// by the server as room.signal); this page's own session with the server carries the microphone up (captions
// of my speech for everyone, interpretation for listeners of other languages) and interpretation speech down
// (played by page.js on #remote-audio). Events: DESIGN.md section 4, "Calls".
// Join links: call/room-links.js. What a listener hears: call/listen-choice.js; ducking while interpretation
// plays: ducking.js; how late a speaker's captions or interpretation are: lag-badges.js.

import { ListenChoice } from "../call/listen-choice.js";
import { RECONNECT_REASONS, Reconnector } from "../call/reconnect.js";
import { clientTokenFetcher, downloadTranscript, roomFromLocation, shareLink } from "../call/room-links.js";
import { SpeakingIndicators } from "../call/speaking.js";
import { store } from "../call/store.js";
import { makeRemoteTile, renderLag, renderTile } from "../call/tiles.js";
import { transcriptLine } from "../call/transcript-lines.js";
import { Ducking, speakerId } from "../ducking.js";
import { LagBadges } from "../lag-badges.js";
import { pickListenOption, trackEffectiveConfig } from "../listen-languages.js";
import { Mesh } from "../mesh.js";

const DUCK_VOLUME = 0.15; // the original voice under the interpretation while it plays (ducking.js)

export function mount({ client, config, log, devices, errors, $ }) {
  // ------------------------------------------------------------ room, link, identity
  const { room, joinToken, params } = roomFromLocation();
  $("room-name").textContent = room;
  document.body.dataset.room = room;

  const nameInput = $("call-name");
  const speakSelect = $("speak-language");
  const listenSelect = $("listen-language");
  const interpretBox = $("hear-interpretation");
  const textOnlyBox = $("listen-text-only");
  const browserLanguage = String(navigator.language || "en").split("-")[0].toLowerCase();
  nameInput.value = params.get("name") || store.get("name", "");
  pickListenOption(speakSelect, params.get("speak") || store.get("speak", browserLanguage));
  const listen = new ListenChoice({
    select: listenSelect, textOnlyBox, noteEl: $("listen-quality"), capabilities: config && config.capabilities,
    preferred: [params.get("hear"), store.get("hear", null), browserLanguage],
  });
  client.fetchClientToken = clientTokenFetcher(room, joinToken);

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
    speaking.watch("self", audioTrack ? stream : null);
  });

  // ------------------------------------------------------------ tiles
  const tilesEl = $("tiles");
  const selfTile = $("tile-self");
  const tiles = new Map(); // participant id -> {el, video, info}
  let myId = null;
  let participants = new Map();

  const tileFor = (id) => (id && id === myId ? selfTile : tiles.get(id)?.el || null);
  const speaking = new SpeakingIndicators((id) => (id === "self" ? selfTile : tiles.get(id)?.el || null));

  const renderCount = () => {
    const n = tiles.size + 1;
    tilesEl.dataset.count = String(n);
    const count = $("room-count");
    count.dataset.count = myId ? String(n) : "0";
    count.textContent = myId ? `${n} in the call` : "";
  };

  // A voice goes down only while its interpretation plays (translation.speech.started .. done).
  const ducking = new Ducking({
    enabled: () => interpretBox.checked && !listen.textOnly,
    apply: (id, ducked) => {
      const entry = tiles.get(id);
      if (!entry) return;
      entry.video.volume = ducked ? DUCK_VOLUME : 1.0;
      entry.el.dataset.ducked = String(ducked);
    },
  });
  const lags = new LagBadges((id, lag) => renderLag(tileFor(id), lag));

  const addTile = (info) => {
    let entry = tiles.get(info.participant_id);
    if (!entry) {
      entry = { ...makeRemoteTile(info.participant_id), info };
      tilesEl.append(entry.el);
      tiles.set(info.participant_id, entry);
    }
    entry.info = info;
    renderTile(entry.el, info);
    renderCount();
    return entry;
  };

  const removeTile = (id) => {
    const entry = tiles.get(id);
    if (!entry) return;
    speaking.watch(id, null);
    entry.video.srcObject = null;
    ducking.forget(id);
    lags.forget(id);
    entry.el.remove();
    tiles.delete(id);
    renderCount();
  };

  const clearRoom = () => {
    if (mesh) mesh.closeAll();
    mesh = null;
    for (const id of [...tiles.keys()]) removeTile(id);
    ducking.clear();
    lags.clear();
    participants = new Map();
    myId = null;
    selfTile.dataset.participantId = "";
    renderCount();
  };

  // ------------------------------------------------------------ transcript
  const transcript = $("room-transcript");
  const lineFor = (speaker, segmentId) => transcriptLine(transcript, speaker, segmentId);

  // ------------------------------------------------------------ server events
  client.on("room.joined", async (ev) => {
    clearRoom();
    myId = ev.participant_id;
    selfTile.dataset.participantId = myId;
    participants = new Map(ev.participants.map((p) => [p.participant_id, p]));
    for (const p of ev.participants) {
      if (p.participant_id === myId) renderTile(selfTile, p, { withName: false });
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
      refreshConfig: () => client.refreshIceServers(), // TURN credentials expire (turn_ttl_s): ice-servers.js
      stream: local.stream,
      signal: (to, kind, payload) => client.send({ type: "room.signal", to, kind, payload }),
    });
    mesh.addEventListener("track", ({ detail }) => {
      const entry = tiles.get(detail.id) || addTile(participants.get(detail.id) || { participant_id: detail.id, name: "?" });
      if (entry.video.srcObject !== detail.stream) entry.video.srcObject = detail.stream;
      entry.video.play().catch((err) => log.note(`remote media autoplay blocked: ${err.message}`, "warn"));
      if (detail.track.kind === "audio") speaking.watch(detail.id, detail.stream);
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
    // A speaker who now speaks another language has a new interpretation (or none): its voice goes back to full
    // volume until that interpretation speaks.
    if (before && before.language !== info.language) ducking.forget(info.participant_id);
    if (info.participant_id === myId) renderTile(selfTile, info, { withName: false });
    else if (tiles.has(info.participant_id)) addTile(info);
  });

  const showCaption = (ev, final) => {
    const speaker = ev.speaker || { participant_id: myId, name: "You" };
    lags.caption(speaker.participant_id, ev);
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
  client.on("translation.speech.started", (ev) => ducking.started(ev));
  client.on("translation.speech.done", (ev) => ducking.done(ev));
  client.on("translation.speech.catchup", (ev) => lags.speech(speakerId(ev), ev));

  // ------------------------------------------------------------ controls
  const joinBtn = $("join");
  const leaveBtn = $("leave");
  const micBtn = $("mute-mic");
  const camBtn = $("mute-camera");

  const renderControls = () => {
    const s = client.state;
    const live = s === "connected" || s === "connecting" || reconnect.pending;
    joinBtn.disabled = live;
    leaveBtn.disabled = !live;
    micBtn.disabled = s !== "connected";
    camBtn.disabled = s !== "connected" || !local.videoTrack;
  };

  const update = (settings) => {
    if (client.state === "connected") client.send({ type: "session.update", session: settings });
  };

  const join = async () => {
    reconnect.left = false;
    errors.clear();
    const connect = window.rtcAgent && window.rtcAgent.connect;
    if (connect) await connect();
  };
  const reconnect = new Reconnector({ join, changed: () => renderControls(), badge: $("reconnect-state"), log });
  joinBtn.addEventListener("click", () => join());
  leaveBtn.addEventListener("click", async () => {
    reconnect.cancel();
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
    listen.chosen();
    ducking.clear();
    update(listen.settings());
  });
  textOnlyBox.addEventListener("change", () => {
    listen.textOnlyToggled();
    if (listen.textOnly) ducking.clear();
    update(listen.settings());
  });
  interpretBox.addEventListener("change", () => {
    if (!interpretBox.checked) ducking.clear();
    update({ interpret: interpretBox.checked });
  });
  // A change the server cannot serve (unsupported_language; page.js shows its message) leaves its config as it
  // was: the selects go back to the languages in effect.
  trackEffectiveConfig(client, [[listenSelect, "listen_language"], [speakSelect, "language"]], (effective) => {
    listen.reverted(effective);
    store.set("speak", speakSelect.value);
  });
  nameInput.addEventListener("change", () => {
    store.set("name", nameInput.value.trim());
    update({ name: nameInput.value.trim() || "Guest" });
  });

  // ------------------------------------------------------------ link and downloads
  const shareInput = $("share-link");
  $("copy-link").addEventListener("click", async () => {
    const link = await shareLink(room, joinToken);
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

  $("download-vtt").addEventListener("click", () => downloadTranscript(room, joinToken, "vtt", errors));
  $("download-json").addEventListener("click", () => downloadTranscript(room, joinToken, "json", errors));

  // ------------------------------------------------------------ reconnect when the server goes away for a moment
  client.addEventListener("ended", (ev) => {
    clearRoom();
    if (RECONNECT_REASONS.has(ev.detail.reason)) reconnect.schedule(`session ended (${ev.detail.reason})`);
  });
  client.addEventListener("statechange", (ev) => {
    const { state } = ev.detail;
    if (state === "connected") {
      reconnect.connected(); // also when joined with the session card's Connect button
    }
    if (state === "failed" || (state === "disconnected" && !client.pc)) {
      clearRoom();
      const status = client.lastError && client.lastError.status;
      // A refusal (bad config, full room, expired link) is final; a server away or a network fault is retried.
      if (state === "failed" && (!status || status >= 500)) reconnect.schedule("connection failed");
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
        ...listen.settings(),
        captions: true,
        interpret: interpretBox.checked,
      };
    },
    room: () => room,
    ducking, // for tests: its releaseMs / safetyMs
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
        lag: tile.querySelector(".tile-lag").hidden ? "" : tile.querySelector(".tile-lag").textContent,
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
