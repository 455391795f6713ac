// Webinar roles in SFU rooms (room.joined mode "sfu"): speakers are tiles; listeners are a count ("128
// listening"), never a DOM node each, send no media to anyone, and may raise a hand (client event room.hand
// {raised} -> room.participant.updated with hand_raised), which speakers see in a list. A listener's interpretation
// comes from rtc-agent's interpreter feed of its listen language through Janus (call/sfu.js "interpretation"),
// played on its own <audio>; the ducking of the speakers' voices (ducking.js) works as in a mesh room.
//
// The role: ?role=listener in the page's URL (a join link for listeners), or the pre-join "Join as" choice (shown
// when the server has an SFU, capabilities.sfu). ?mode=sfu (a join link to an SFU room) asks for an SFU room.
// Neither is sent when absent: a plain call stays a mesh call.
//
// room.sfu.updated also says how rtc-agent's own connection to Janus is (sfu_state: connected, reconnecting, lost;
// the server reconnects by itself): while it is not connected, captions of the speakers and the interpretation
// pause, which the page's log says once per change.
//
// call.js uses it through: configure() (the session config's role / mode), toServer(options) (what goes up to
// rtc-agent: nothing in an SFU room), sendsMedia(), wantsDevices() (a listener opens no camera or microphone),
// start(...) (the room's media for startMedia in an SFU room) and snapshot() (for tests).

import { el } from "../dom.js";
import { SfuMedia } from "./sfu.js";

export const MAX_HANDS_SHOWN = 50; // raised hands listed by name; more are a count

/** "1 listening" / "128 listening" ("" when there are none). */
export function listenerText(count) {
  const n = Number(count) || 0;
  return n > 0 ? `${n.toLocaleString()} listening` : "";
}

export class Webinar {
  /**
   * @param {object} o
   * @param {object} o.client          the page's RtcClient
   * @param {Function} o.$             getElementById
   * @param {object} o.log             the page's event log
   * @param {URLSearchParams} o.params the page's query
   * @param {object} [o.devices]       the page's DeviceManager (a listener's pre-join preview is closed on joining)
   * @param {object} [o.capabilities]  client_config.capabilities ({sfu: bool, ...})
   */
  constructor({ client, $, log, params, devices = null, capabilities = {} }) {
    this.client = client;
    this.devices = devices;
    this.log = log;
    this.selfTile = $("tile-self");
    this.listenSelect = $("listen-language");
    this.interpretBox = $("hear-interpretation");
    this.textOnlyBox = $("listen-text-only");
    this.linkMode = params.get("mode") === "sfu" ? "sfu" : null;
    this.sfuAvailable = Boolean(capabilities && capabilities.sfu);
    this.mode = null; // the room's mode once joined
    this.media = null; // SfuMedia while in an SFU room
    this.myId = null;
    this.listenerCount = 0;
    this.sfuState = "connected"; // rtc-agent's connection to Janus (room.sfu.updated sfu_state)
    this.hands = new Map(); // participant id -> name, raised hands now
    this.handRaised = false;
    this._buildUi($, params.get("role") === "listener" ? "listener" : "speaker");
    client.on("room.joined", (ev) => this._joined(ev));
    client.on("room.sfu.updated", (ev) => this._updated(ev));
    client.on("room.participant.joined", (ev) => this._participant(ev.participant));
    client.on("room.participant.updated", (ev) => this._participant(ev.participant));
    client.on("room.participant.left", (ev) => {
      if (this.hands.delete(ev.participant_id)) this._renderHands();
    });
    for (const input of [this.listenSelect, this.interpretBox, this.textOnlyBox]) {
      input?.addEventListener("change", () => this.media && this.media.setInterpretation(this._interpretation()));
    }
  }

  _buildUi($, role) {
    // the pre-join choice, next to the languages (hidden without an SFU)
    this.roleField = el("label", "field small role-field");
    this.roleSelect = el("select");
    this.roleSelect.id = "call-role";
    for (const [value, label] of [["speaker", "Speaker (camera and microphone)"], ["listener", "Listener (watch, raise a hand)"]]) {
      const option = el("option", null, label);
      option.value = value;
      this.roleSelect.append(option);
    }
    this.roleSelect.value = role;
    this.roleField.append(el("span", null, "Join as"), this.roleSelect);
    this.roleField.hidden = !this.sfuAvailable && role !== "listener";
    const fields = $("call-setup")?.querySelector(".prejoin-fields");
    const before = fields?.querySelector(".room-presence, .button-row");
    if (fields) fields.insertBefore(this.roleField, before || null);

    // in the call: the listener count, my hand, the raised hands, the interpretation's audio
    this.box = el("div", "webinar");
    this.box.id = "webinar";
    this.box.hidden = true;
    this.countEl = el("span", "readout listener-count");
    this.countEl.id = "listener-count";
    this.countEl.dataset.count = "0";
    this.handBtn = el("button", "button small", "Raise hand");
    this.handBtn.type = "button";
    this.handBtn.id = "raise-hand";
    this.handBtn.setAttribute("aria-pressed", "false");
    this.handBtn.hidden = true;
    this.handBtn.addEventListener("click", () => this.raiseHand(!this.handRaised));
    this.handsBox = el("div", "raised-hands");
    this.handsBox.hidden = true;
    this.handsList = el("ul");
    this.handsList.id = "raised-hands";
    this.handsBox.append(el("strong", null, "Raised hands"), this.handsList);
    this.audio = el("audio");
    this.audio.id = "sfu-interpretation";
    this.audio.autoplay = true;
    this.box.append(this.countEl, this.handBtn, this.handsBox, this.audio);
    const tiles = $("tiles");
    if (tiles) tiles.before(this.box);
  }

  get role() {
    return this.roleSelect.value === "listener" ? "listener" : "speaker";
  }

  /** The session config's part of the role and the mode (nothing for a plain call). */
  configure() {
    const out = {};
    if (this.linkMode || this.role === "listener") out.mode = "sfu";
    if (this.role === "listener") out.role = "listener";
    return out;
  }

  /** Whether my microphone goes up to rtc-agent (a mesh room) or not (an SFU room: rtc-agent hears Janus). */
  sendsMedia() {
    return !(this.mode === "sfu" || this.linkMode === "sfu" || this.role === "listener");
  }

  /** Whether joining needs my camera and microphone (a listener needs neither). */
  wantsDevices() {
    return this.role !== "listener";
  }

  /** The options of RtcClient.connect for rtc-agent's own connection: no tracks in an SFU room. */
  toServer(options) {
    return this.sendsMedia() ? options : { ...options, audioTrack: null, videoTrack: null, stream: null };
  }

  /** The listen language whose interpreter feed to play (listeners hearing interpretation), or null. */
  _interpretation() {
    if (this.role !== "listener" || !this.interpretBox?.checked || this.textOnlyBox?.checked) return null;
    return this.listenSelect?.value || null;
  }

  /** The room's media of an SFU room (startMedia's "sfu" mode); null when `stillJoined()` went false. */
  async start({ joinToken, ev, stream, stillJoined }) {
    let rtcConfig = { iceServers: [] };
    try {
      rtcConfig = await this.client.fetchIceServers(joinToken || null);
    } catch (err) {
      this.log.note(`ICE servers unavailable for the SFU: ${err.message}`, "warn");
    }
    if (!stillJoined() || !ev.sfu) return null;
    const media = new SfuMedia({ sfu: ev.sfu, publish: this.role === "speaker", stream: this.role === "speaker" ? stream : null,
      rtcConfig, interpretation: this._interpretation(), log: this.log });
    media.addEventListener("interpretation", ({ detail }) => this._playInterpretation(detail));
    media.addEventListener("closed", () => {
      if (this.media === media) this._left();
    });
    this.media = media;
    media.start();
    return media;
  }

  _playInterpretation({ language, stream }) {
    this.audio.srcObject = stream;
    this.audio.dataset.language = language || "";
    if (stream) this.audio.play().catch((err) => this.log.note(`interpretation autoplay blocked: ${err.message}`, "warn"));
  }

  _joined(ev) {
    this.mode = ev.mode || "mesh";
    this.myId = ev.participant_id;
    this.hands = new Map();
    const sfu = this.mode === "sfu";
    document.body.dataset.roomMode = this.mode;
    this.box.hidden = !sfu;
    if (!sfu) return;
    const me = ev.participants.find((p) => p.participant_id === ev.participant_id);
    if (me && me.role === "listener") this.roleSelect.value = "listener";
    const listener = this.role === "listener";
    document.body.dataset.callRole = this.role;
    // a listener is no tile, not even its own, and keeps no camera or microphone open (the pre-join preview)
    this.selfTile.hidden = listener;
    if (listener && this.devices) this.devices.close();
    this.handBtn.hidden = !listener;
    this.handRaised = Boolean(me && me.hand_raised);
    this._renderHand();
    for (const p of ev.participants) this._participant(p);
    this._count(ev.listener_count);
    // joined with my microphone up (the room's mode was not known): rtc-agent hears me through Janus instead
    const sender = this.client.senders && this.client.senders.audio;
    if (sender && sender.track) sender.replaceTrack(null).catch(() => {});
  }

  _left() {
    this.media = null;
    this.mode = null;
    this.box.hidden = true;
    this.selfTile.hidden = false;
    this.hands = new Map();
    this._renderHands();
    this._playInterpretation({ language: null, stream: null });
    delete document.body.dataset.roomMode;
  }

  _updated(ev) {
    this._count(ev.listener_count);
    const state = ev.sfu_state || "connected";
    if (state !== this.sfuState) {
      this.sfuState = state;
      if (state === "reconnecting") this.log.note("rtc-agent lost the SFU; captions pause while it reconnects", "warn");
      else if (state === "lost") this.log.note("rtc-agent could not reach the SFU again; captions stay paused", "warn");
      else this.log.note("rtc-agent is back on the SFU; captions continue");
    }
    if (this.media) this.media.setInterpreterFeeds(ev.interpreter_feeds || {});
  }

  _count(count) {
    this.listenerCount = Number(count) || 0;
    this.countEl.dataset.count = String(this.listenerCount);
    this.countEl.textContent = listenerText(this.listenerCount);
  }

  _participant(p) {
    if (!p || this.mode !== "sfu") return;
    const had = this.hands.has(p.participant_id);
    if (p.hand_raised) this.hands.set(p.participant_id, p.name || "Guest");
    else this.hands.delete(p.participant_id);
    if (p.participant_id === this.myId) {
      this.handRaised = Boolean(p.hand_raised);
      this._renderHand();
    }
    if (had !== Boolean(p.hand_raised)) this._renderHands();
  }

  /** Raise (or lower) my hand: room.hand; the button follows the server's room.participant.updated. */
  raiseHand(raised) {
    if (this.mode !== "sfu" || this.client.state !== "connected") return;
    this.client.send({ type: "room.hand", raised: Boolean(raised) });
  }

  _renderHand() {
    this.handBtn.setAttribute("aria-pressed", String(this.handRaised));
    this.handBtn.textContent = this.handRaised ? "Lower hand" : "Raise hand";
  }

  _renderHands() {
    const names = [...this.hands.entries()].filter(([id]) => id !== this.myId);
    this.handsBox.hidden = this.role === "listener" || !names.length;
    const items = names.slice(0, MAX_HANDS_SHOWN).map(([id, name]) => {
      const li = el("li", null, name);
      li.dataset.participantId = id;
      return li;
    });
    if (names.length > MAX_HANDS_SHOWN) items.push(el("li", "more", `and ${names.length - MAX_HANDS_SHOWN} more`));
    this.handsList.replaceChildren(...items);
  }

  /** For tests and readouts: the room's mode, my role, the listener count, raised hands, the interpretation. */
  async snapshot() {
    const interpretation = this.media ? await this.media.interpretationStats() : null;
    return {
      mode: this.mode, role: this.role, listenerCount: this.listenerCount, sfuState: this.sfuState, listenerText: this.countEl.textContent,
      hands: [...this.hands.values()], handRaised: this.handRaised, selfTileHidden: this.selfTile.hidden,
      feeds: this.media ? [...this.media.feeds.values()].map((f) => f.display) : [],
      sfuJoins: this.media ? this.media.joins : 0,
      interpretation, interpretationPlaying: Boolean(this.audio.srcObject) && !this.audio.paused,
    };
  }
}
