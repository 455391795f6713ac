// Call: a room of up to six people. Media between people goes browser to browser (mesh.js, signaling relayed
// by the server as room.signal; startMedia(mode) is the seam where a room's mode picks it); this page's own
// session with the server carries the microphone up (captions of my speech for everyone, interpretation for
// listeners of other languages) and interpretation speech down (played by page.js on #remote-audio).
// Events: DESIGN.md section 4, "Calls".
//
// One join flow: the pre-join form (call/prejoin.js) with one Join; a reload rejoins by itself with the same
// room, name, languages and mute state and keeps the transcript (call/session-memory.js). One mute state
// (media-toggles.js, shared with the sidebar, Alt+M and push-to-talk) reaches the server (input_audio.muted,
// session.update {mic_muted}) and everyone else (room.participant.updated). One connection status
// (call/call-status.js). Presence on the tiles (call/stage.js), announced once (call/announcer.js). Join links:
// call/room-links.js. What a listener hears: call/listen-choice.js; ducking: ducking.js; lag: lag-badges.js.

import { Announcer } from "../call/announcer.js";
import { AutoplayGate } from "../call/autoplay.js";
import { CallStatus, reasonText } from "../call/call-status.js";
import { ListenChoice } from "../call/listen-choice.js";
import { startMesh } from "../call/mesh-media.js";
import { PreJoin } from "../call/prejoin.js";
import { PushToTalk } from "../call/push-to-talk.js";
import { RECONNECT_REASONS, Reconnector } from "../call/reconnect.js";
import { RoomCaptions } from "../call/room-captions.js";
import { clientTokenFetcher, downloadTranscript, roomFromLocation, shareLink } from "../call/room-links.js";
import { sessionMemory } from "../call/session-memory.js";
import { SpeakingIndicators } from "../call/speaking.js";
import { Stage } from "../call/stage.js";
import { store } from "../call/store.js";
import { renderLag } from "../call/tiles.js";
import { Webinar } from "../call/webinar.js";
import { Ducking, speakerId } from "../ducking.js";
import { LagBadges } from "../lag-badges.js";
import { pickListenOption, trackEffectiveConfig } from "../listen-languages.js";

const DUCK_VOLUME = 0.15; // the original voice under the interpretation while it plays (ducking.js)
const DEFAULT_TILE_GRACE_MS = 10_000;

export function mount({ client, config, log, devices, errors, $, toggles, announce, showConnection, connect }) {
  // ------------------------------------------------------------ room, link, identity, what a reload remembers
  const where = roomFromLocation();
  let room = where.room;
  const { joinToken, params } = where;
  const remembered = sessionMemory.joined();
  const rejoin = remembered && remembered.room === room ? remembered : null;
  const showRoom = () => {
    $("room-name").textContent = room;
    document.body.dataset.room = room;
  };
  showRoom();

  const nameInput = $("call-name");
  const speakSelect = $("speak-language");
  const listenSelect = $("listen-language");
  const interpretBox = $("hear-interpretation");
  const textOnlyBox = $("listen-text-only");
  const browserLanguage = String(navigator.language || "en").split("-")[0].toLowerCase();
  nameInput.value = rejoin?.name || params.get("name") || store.get("name", "");
  pickListenOption(speakSelect, rejoin?.speak || params.get("speak") || store.get("speak", browserLanguage));
  if (rejoin) interpretBox.checked = rejoin.interpret !== false;
  const listen = new ListenChoice({
    select: listenSelect, textOnlyBox, noteEl: $("listen-quality"), capabilities: config && config.capabilities,
    preferred: [rejoin?.hear, params.get("hear"), store.get("hear", null), browserLanguage],
  });
  client.fetchClientToken = clientTokenFetcher(() => room, joinToken);
  const webinar = new Webinar({ client, $, log, params, devices, capabilities: config && config.capabilities }); // SFU

  // ------------------------------------------------------------ status, announcements, tiles
  // The sidebar's state badge mirrors the call status, whose "reconnecting in N s" counts down each second: it
  // must not be a live region too (phase changes are announced once, through the announcer).
  $("connection-state")?.setAttribute("aria-live", "off");
  const status = new CallStatus({ badge: $("call-status"), show: showConnection });
  const announcer = new Announcer(announce);
  const autoplay = new AutoplayGate({ errors, media: () => [...document.querySelectorAll(".tile.remote video, #remote-audio")] });
  const speaking = new SpeakingIndicators((id) => stage.tileFor(id));
  const ducking = new Ducking({
    enabled: () => interpretBox.checked && !listen.textOnly,
    apply: (id, ducked) => {
      const entry = stage.tiles.get(id);
      if (!entry) return;
      entry.video.volume = ducked ? DUCK_VOLUME : 1.0;
      entry.el.dataset.ducked = String(ducked);
    },
  });
  const lags = new LagBadges((id, lag) => renderLag(stage.tileFor(id), lag));
  const stage = new Stage({
    tilesEl: $("tiles"), selfTile: $("tile-self"), countEl: $("room-count"), announcer,
    graceMs: Number.isFinite(config.room_tile_grace_ms) ? config.room_tile_grace_ms : DEFAULT_TILE_GRACE_MS,
    forget: (id) => {
      speaking.watch(id, null);
      ducking.forget(id);
      lags.forget(id);
    },
  });

  // ------------------------------------------------------------ local media: audio to the server, all to the mesh
  let local = { stream: null, audioTrack: null, videoTrack: null };
  let media = null; // the browser-to-browser media of the room (startMedia)
  const originalConnect = client.connect.bind(client);
  client.connect = (options = {}) => {
    local = { stream: options.stream || null, audioTrack: options.audioTrack || null, videoTrack: options.videoTrack || null };
    const audioOnly = local.audioTrack ? new MediaStream([local.audioTrack]) : null;
    return originalConnect(webinar.toServer({ ...options, videoTrack: null, stream: audioOnly }));
  };
  const originalReplace = client.replaceTrack.bind(client);
  client.replaceTrack = async (kind, track) => {
    if (kind === "audio") local.audioTrack = track;
    else local.videoTrack = track;
    if (media) await media.replaceTrack(kind, track);
    return kind === "audio" && webinar.sendsMedia() ? originalReplace(kind, track) : true;
  };
  devices.addEventListener("change", (ev) => {
    const { stream, audioTrack, videoTrack } = ev.detail;
    local = { stream, audioTrack, videoTrack };
    speaking.watch("self", audioTrack ? stream : null);
  });

  /** Start the room's media between participants: `mode` "mesh" (browser to browser) is this page's own. */
  const startMedia = async (mode, ev) => {
    const how = { client, log, joinToken, ev, stream: local.stream, stillJoined: () => stage.myId === ev.participant_id };
    const started = mode === "sfu" ? await webinar.start(how) : await startMesh(how); // sfu: call/sfu.js, Janus
    if (!started) return;
    media = started;
    media.addEventListener("track", ({ detail }) => {
      const entry = stage.tiles.get(detail.id)
        || stage.add(stage.participants.get(detail.id) || { participant_id: detail.id, name: "?" }, { quiet: true });
      if (entry.video.srcObject !== detail.stream) entry.video.srcObject = detail.stream;
      autoplay.play(entry.video, log);
      if (detail.track.kind === "audio") speaking.watch(detail.id, detail.stream);
    });
    media.addEventListener("state", ({ detail }) => stage.peerState(detail.id, detail.state));
    // The newcomer connects to everyone already here; they answer.
    for (const id of stage.participants.keys()) if (id !== stage.myId) media.connect(id);
    for (const early of earlySignals.splice(0)) media.handleSignal(early.from, early.kind, early.payload);
  };

  const earlySignals = []; // signals that arrive before the mesh exists (ICE servers still loading)
  const leaveRoom = () => {
    if (media) media.closeAll();
    media = null;
    earlySignals.length = 0;
    stage.clear();
    ducking.clear();
    lags.clear();
    status.update({ joined: false });
  };

  // ------------------------------------------------------------ captions and the transcript (kept over a reload)
  const captions = new RoomCaptions({ transcript: $("room-transcript"), stage, lags, announcer,
    listenLanguage: () => listenSelect.value, restoreRoom: rejoin ? room : null });

  // ------------------------------------------------------------ server events
  client.on("room.joined", (ev) => {
    leaveRoom();
    captions.joined(room);
    const tiled = ev.participants.filter((p) => p.role !== "listener" || p.participant_id === ev.participant_id);
    stage.joined({ ...ev, participants: tiled }); // listeners are a count, not tiles (call/webinar.js)
    status.update({ joined: true, ended: null });
    sessionMemory.rememberJoin({ room, name: nameInput.value.trim(), speak: speakSelect.value, hear: listenSelect.value,
      textOnly: listen.textOnly, interpret: interpretBox.checked, muted: toggles.muted, cameraOff: toggles.cameraOff });
    const me = ev.participants.find((p) => p.participant_id === ev.participant_id);
    if (me && me.name !== nameInput.value.trim()) log.note(`in this room you are "${me.name}"`);
    startMedia(ev.mode || "mesh", ev);
  });
  client.on("room.signal", (ev) => {
    if (media) media.handleSignal(ev.from, ev.kind, ev.payload);
    else if (earlySignals.length < 200) earlySignals.push(ev);
  });
  client.on("room.participant.joined", (ev) => {
    if (ev.participant.role !== "listener") stage.add(ev.participant); // listeners are a count (call/webinar.js)
    log.note(`${ev.participant.name} joined`);
  });
  client.on("room.participant.left", (ev) => {
    if (media) media.close(ev.participant_id);
    stage.gone(ev.participant_id, ev.name, ev.reason);
    log.note(`${ev.name} left${ev.reason ? ` (${ev.reason})` : ""}`);
  });
  client.on("room.participant.updated", (ev) => {
    const info = ev.participant;
    const before = stage.participants.get(info.participant_id);
    // A speaker who now speaks another language has a new interpretation (or none): its voice goes back to full
    // volume until that interpretation speaks.
    if (before && before.language !== info.language) ducking.forget(info.participant_id);
    stage.update(info);
  });

  client.on("caption.partial", (ev) => captions.caption(ev, false));
  client.on("caption.final", (ev) => {
    if (ev.text && ev.text.trim()) captions.caption(ev, true);
  });
  client.on("caption.translation", (ev) => captions.translation(ev));
  client.on("translation.speech.started", (ev) => ducking.started(ev));
  client.on("translation.speech.done", (ev) => ducking.done(ev));
  client.on("translation.speech.catchup", (ev) => lags.speech(speakerId(ev), ev));

  // ------------------------------------------------------------ joining and leaving
  const leaveBtn = $("leave");
  const inCall = () => ["connecting", "connected", "unstable", "reconnecting"].includes(status.phase);
  const join = async () => {
    reconnect.left = false;
    errors.clear();
    status.update({ ended: null, leftAt: null });
    // A rejoin can come before the ended session's connection has closed (a draining server closes it a moment
    // after session.ended): close it first, or the client refuses to connect again and nothing retries.
    // (The teardown is synchronous; the DELETE to the old server is not waited for.)
    if (client.state === "connected" || client.state === "connecting") client.disconnect().catch(() => {});
    await connect();
    // a try that failed without a "failed" state (which retries or refuses by itself) is tried again
    const up = ["connecting", "connected", "failed"].includes(client.state);
    if (!up && !reconnect.left && status.phase === "reconnecting") reconnect.schedule("rejoin failed");
  };
  const reconnect = new Reconnector({ join, changed: (pending) => status.update({ reconnect: pending }), log });
  const prejoin = new PreJoin({
    $, devices, room, joinToken,
    onJoin: () => {
      if (!inCall()) join(); // Enter in a field during the call changes that field only
    },
    onRoom: (name) => {
      room = name;
      showRoom();
    },
  });
  leaveBtn.addEventListener("click", async () => {
    reconnect.cancel();
    sessionMemory.forgetJoin();
    sessionMemory.forgetLines();
    await client.disconnect();
    leaveRoom();
    status.update({ leftAt: Date.now(), ended: null });
    announcer.say("You left the call");
  });
  status.addEventListener("change", ({ detail }) => {
    leaveBtn.disabled = !inCall();
    const upNow = detail.phase === "prejoin" || detail.phase === "ended";
    const upBefore = detail.previous === "prejoin" || detail.previous === "ended";
    if (upNow && !upBefore) prejoin.show({ preview: false });
    else if (!upNow && upBefore) prejoin.hide();
    const rejoining = detail.phase === "reconnecting" && detail.previous !== "reconnecting";
    if (rejoining) announcer.say("Connection lost, reconnecting");
    if (detail.phase === "connected" && detail.previous === "reconnecting") announcer.say("Back in the call");
  });

  // ------------------------------------------------------------ one mute state: to the server and the room
  const update = (settings) => {
    if (client.state === "connected") client.send({ type: "session.update", session: settings });
  };
  toggles.bind("mic", $("mute-mic"));
  toggles.bind("camera", $("mute-camera"));
  toggles.addEventListener("change", ({ detail }) => {
    update(detail.kind === "mic" ? { mic_muted: detail.value } : { camera_muted: detail.value });
    sessionMemory.update(detail.kind === "mic" ? { muted: detail.value } : { cameraOff: detail.value });
  });
  const ptt = new PushToTalk({ box: $("push-to-talk"), toggles, live: () => status.phase === "connected" });
  if (rejoin) {
    toggles.set("mic", rejoin.muted, { source: "rejoin" });
    toggles.set("camera", rejoin.cameraOff, { source: "rejoin" });
  }

  speakSelect.addEventListener("change", () => {
    store.set("speak", speakSelect.value);
    sessionMemory.update({ speak: speakSelect.value });
    update({ language: speakSelect.value });
  });
  listenSelect.addEventListener("change", () => {
    listen.chosen();
    ducking.clear();
    sessionMemory.update({ hear: listenSelect.value });
    update(listen.settings());
  });
  textOnlyBox.addEventListener("change", () => {
    listen.textOnlyToggled();
    if (listen.textOnly) ducking.clear();
    sessionMemory.update({ textOnly: listen.textOnly });
    update(listen.settings());
  });
  interpretBox.addEventListener("change", () => {
    if (!interpretBox.checked) ducking.clear();
    sessionMemory.update({ interpret: interpretBox.checked });
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
    sessionMemory.update({ name: nameInput.value.trim() });
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

  // ------------------------------------------------------------ the connection: one status, rejoin after faults
  client.addEventListener("ended", (ev) => {
    leaveRoom();
    if (RECONNECT_REASONS.has(ev.detail.reason) && !reconnect.left) {
      reconnect.schedule(`session ended (${ev.detail.reason})`);
    } else if (ev.detail.reason !== "deleted") {
      status.update({ ended: ev.detail.reason });
    }
  });
  // A server connection that stays "disconnected" (its node died: Chrome says so ~5 s after, and "failed" only
  // ~10 s later) is given up after LOST_AFTER_MS and rejoined through the same address, where another node hosts
  // the room by then (issue 24: back in the room within 15 s).
  const LOST_AFTER_MS = 4000;
  let lostTimer = null;
  client.addEventListener("statechange", (ev) => {
    clearTimeout(lostTimer);
    if (ev.detail.state !== "disconnected" || !client.pc) return;
    lostTimer = setTimeout(async () => {
      if (client.state !== "disconnected" || !client.pc || reconnect.left) return;
      await client.disconnect();
      reconnect.schedule("connection lost");
    }, LOST_AFTER_MS);
  });
  client.addEventListener("statechange", (ev) => {
    const { state } = ev.detail;
    if (state === "connected") reconnect.connected();
    if (state === "failed" || (state === "disconnected" && !client.pc)) {
      leaveRoom();
      const code = client.lastError && client.lastError.status;
      // A refusal (bad config, full room, expired link) is final; a server away or a network fault is retried.
      if (state === "failed" && (!code || code >= 500)) reconnect.schedule("connection failed");
      else if (state === "failed") {
        reconnect.cancel();
        sessionMemory.forgetJoin();
        status.update({ ended: "refused" });
      }
    }
    status.update({ client: state, hasPeer: Boolean(client.pc) });
  });
  status.update({ client: client.state });
  if (rejoin) setTimeout(() => join(), 0); // a reload: back into the call with the same choices
  else prejoin.show();

  return {
    wantsDevices: () => webinar.wantsDevices(), // a webinar listener opens no camera or microphone
    webinar, // for tests: snapshot()
    keepsMediaState: true, // page.js keeps the mute state over a session's end: a rejoin is not heard unasked
    /** The banner for a session's end: none when this page rejoins by itself (the status says so). */
    endedMessage(detail) {
      return RECONNECT_REASONS.has(detail.reason) && !reconnect.left ? null
        : `Session ended: ${detail.message || reasonText(detail.reason)}`;
    },
    configure(sessionConfig) {
      store.set("name", nameInput.value.trim());
      return {
        ...sessionConfig,
        room,
        name: nameInput.value.trim() || "Guest",
        language: speakSelect.value,
        ...listen.settings(),
        captions: true,
        interpret: interpretBox.checked,
        mic_muted: toggles.muted,
        camera_muted: toggles.cameraOff,
        ...webinar.configure(),
      };
    },
    room: () => room,
    ducking, // for tests: its releaseMs / safetyMs
    status, // for tests: .phase, .current
    announcer, // for tests: .last
    pushToTalk: ptt,
    participantId: () => stage.myId,
    participants: () => [...stage.participants.values()],
    join,
    /** For tests and readouts: per remote tile, its name, flags, presence, caption and media numbers. */
    async stats() {
      const peers = media ? await media.stats() : {};
      // No browser-to-browser connection to a participant (yet): its numbers read zero.
      return stage.snapshot().map((tile) => ({
        ...tile, state: "none", framesDecoded: 0, audioEnergy: 0, audioBytes: 0, ...(peers[tile.id] || {}),
      }));
    },
  };
}
