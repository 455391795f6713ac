// The call's tiles and who they show: my tile and one per other participant, their flags (language, muted,
// camera off), and presence. Joins, leaves, mutes and "reconnecting" show on the tiles and are announced once
// (call/announcer.js). A tile whose participant is gone is marked at once: "left" (it left), "connection lost"
// (its session ended on a fault: room.participant.left with a fault reason, or our browser-to-browser connection
// failed for good), and removed after `graceMs` (client_config.room_tile_grace_ms); a participant who rejoins
// under the same name within it takes the tile back ("is back"). Our own browser-to-browser link to a participant
// still in the room: "reconnecting" while it is interrupted, "connection lost" once it failed (mesh.js restarts
// ICE; the mark goes when it connects again).

import { clearTile, makeRemoteTile, renderPresence, renderTile } from "./tiles.js";

/** room.participant.left reasons that mean a fault (the participant may come back), not a goodbye. */
const FAULT_REASONS = new Set(["heartbeat_lost", "ice_failed", "peer_closed", "server_shutdown", "internal_error",
  "connect_timeout"]);

export class Stage {
  /**
   * @param {object} o
   * @param {HTMLElement} o.tilesEl    the grid
   * @param {HTMLElement} o.selfTile   my tile
   * @param {HTMLElement} o.countEl    "3 in the call"
   * @param {number} o.graceMs         how long a gone tile stays
   * @param {object} o.announcer       call/announcer.js
   * @param {Function} o.forget        forget(id): a tile went away (its speaking meter, ducking, lag)
   */
  constructor({ tilesEl, selfTile, countEl, graceMs, announcer, forget }) {
    this.tilesEl = tilesEl;
    this.selfTile = selfTile;
    this.countEl = countEl;
    this.graceMs = graceMs;
    this.announcer = announcer;
    this._forget = forget;
    this.myId = null;
    this.participants = new Map(); // id -> info, the participants in the room now (me included)
    this.tiles = new Map(); // id -> {el, video, info, goneAt, timer}
  }

  /** My tile or the tile of participant `id` (null when there is none). */
  tileFor(id) {
    if (id === "self" || (id && id === this.myId)) return this.selfTile;
    return this.tiles.get(id)?.el || null;
  }

  /** room.joined: the room as it is (no announcements: I just came in). */
  joined(ev) {
    this.clear();
    this.myId = ev.participant_id;
    this.selfTile.dataset.participantId = ev.participant_id;
    for (const p of ev.participants) {
      this.participants.set(p.participant_id, p);
      if (p.participant_id === this.myId) renderTile(this.selfTile, p, { withName: false });
      else this.add(p, { quiet: true });
    }
    this._renderCount();
  }

  /** A participant is here (room.participant.joined, or a track before its event): its tile, announced. */
  add(info, { quiet = false } = {}) {
    const id = info.participant_id;
    this.participants.set(id, info);
    let entry = this.tiles.get(id);
    let back = false;
    if (!entry) {
      const gone = [...this.tiles.entries()].find(([, e]) => e.goneAt && e.info.name === info.name);
      if (gone) { // the same person, rejoined within the grace period: its new tile replaces the marked one
        back = true;
        this.remove(gone[0]);
      }
      entry = { ...makeRemoteTile(id), info, goneAt: null, timer: null };
      this.tilesEl.append(entry.el);
      this.tiles.set(id, entry);
      if (!quiet) this.announcer.say(back ? `${info.name} is back` : `${info.name} joined`);
    }
    this._render(entry, info);
    return entry;
  }

  /** room.participant.updated: new flags; a mute or unmute of someone else is announced. */
  update(info) {
    const id = info.participant_id;
    const before = this.participants.get(id);
    this.participants.set(id, info);
    if (id === this.myId) {
      renderTile(this.selfTile, info, { withName: false });
      return;
    }
    const entry = this.tiles.get(id);
    if (!entry) return;
    this._render(entry, info);
    if (before && Boolean(before.mic_muted) !== Boolean(info.mic_muted)) {
      this.announcer.say(`${info.name} ${info.mic_muted ? "muted" : "unmuted"} their microphone`);
    }
    if (before && before.name !== info.name) this.announcer.say(`${before.name} is now ${info.name}`);
  }

  /** Participant `id` is gone (room.participant.left): marked at once, removed after the grace period. */
  gone(id, name, reason) {
    this.participants.delete(id);
    const entry = this.tiles.get(id);
    const fault = FAULT_REASONS.has(reason);
    this.announcer.say(fault ? `${name} lost the connection` : `${name} left`);
    if (!entry) return;
    this._markGone(id, entry, fault ? "lost" : "left");
  }

  /** Our browser-to-browser connection to `id` changed (RTCPeerConnection.connectionState). */
  peerState(id, state) {
    const entry = this.tiles.get(id);
    if (!entry) return;
    entry.el.dataset.connection = state;
    if (entry.goneAt) return; // already gone: the mark stays
    const before = entry.el.dataset.presence;
    if (state === "disconnected" && before !== "reconnecting" && before !== "lost") {
      renderPresence(entry.el, "reconnecting");
      this.announcer.say(`Connection to ${entry.info.name} interrupted, reconnecting`);
    } else if (state === "failed" && before !== "lost") { // mesh.js restarts ICE; the tile stays while it tries
      renderPresence(entry.el, "lost");
      this.announcer.say(`Connection to ${entry.info.name} lost`);
    } else if (state === "connected" && (before === "reconnecting" || before === "lost")) {
      renderPresence(entry.el, null);
      this.announcer.say(`Connection to ${entry.info.name} restored`);
    } else if (state === "closed" && this.participants.has(id)) {
      this._markGone(id, entry, "lost");
    }
  }

  _markGone(id, entry, mark) {
    renderPresence(entry.el, mark);
    entry.goneAt = performance.now();
    entry.el.dataset.goneAt = String(Math.round(entry.goneAt));
    entry.video.srcObject = null;
    this._forget(id);
    clearTimeout(entry.timer);
    entry.timer = setTimeout(() => this.remove(id), this.graceMs);
    this._renderCount();
  }

  _render(entry, info) {
    entry.info = info;
    renderTile(entry.el, info);
    this._renderCount();
  }

  /** Take `id`'s tile away now. */
  remove(id) {
    const entry = this.tiles.get(id);
    if (!entry) return;
    clearTimeout(entry.timer);
    this._forget(id);
    entry.video.srcObject = null;
    entry.el.remove();
    this.tiles.delete(id);
    this._renderCount();
  }

  /** Out of the room (left, or the session ended): every tile goes, mine shows nothing of the call. */
  clear() {
    for (const id of [...this.tiles.keys()]) this.remove(id);
    this.participants = new Map();
    this.myId = null;
    this.selfTile.dataset.participantId = "";
    clearTile(this.selfTile);
    renderPresence(this.selfTile, null);
    this._renderCount();
  }

  /** The participants here now (gone tiles excluded). */
  present() {
    return [...this.tiles.entries()].filter(([, e]) => !e.goneAt).map(([id]) => id);
  }

  _renderCount() {
    const n = this.present().length + 1;
    this.tilesEl.dataset.count = String(this.tiles.size + 1);
    this.countEl.dataset.count = this.myId ? String(n) : "0";
    this.countEl.textContent = this.myId ? `${n} in the call` : "";
  }

  /** For tests and readouts: per remote tile, its name, flags, presence, caption and media numbers. */
  snapshot() {
    return [...this.tiles.entries()].map(([id, { el: tile, video, info, goneAt }]) => ({
      id,
      name: info.name,
      flags: tile.querySelector(".tile-flags").textContent,
      micMuted: tile.dataset.micMuted === "true",
      presence: tile.dataset.presence,
      goneAt,
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
    }));
  }
}
