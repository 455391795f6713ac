// The call's media in an SFU room (room.joined mode "sfu"): everyone's camera and microphone go through Janus's
// VideoRoom instead of one browser-to-browser connection per participant (mesh.js). It has the shape call.js's
// startMedia expects of a room's media (mesh-media.js): an EventTarget with "track" {id, stream, track} and
// "state" {id, state} per speaker (id = the speaker's participant id, its Janus display name), connect(id),
// handleSignal, replaceTrack, close(id), closeAll and stats; and "interpretation" {language, stream}: the
// rtc-agent interpreter feed of my listen language (display "interpreter-<lang>", audio only), for listeners.
//
// One Janus session (call/janus.js) per room: a publisher handle joins the room with room.joined's sfu {room,
// token, display} (a listener joins too but publishes nothing: the handle hears "publishers" / "unpublished" /
// "leaving"), a speaker publishes its microphone and camera sendonly on its own RTCPeerConnection, and ONE
// multistream subscriber handle (one more RTCPeerConnection) receives every other speaker's feeds and the
// interpreter feed I want. Subscription changes are serialized: one join / update at a time, each answered with
// "start"; Janus's own renegotiation offers (a feed went away) take the same queue. Feeds named "rtc-agent"
// (the server's own participant) and interpreter feeds of other languages are never subscribed.
//
// A lost connection to Janus (the socket closed, the session timed out, a refused request) tears everything down
// and joins again after 1, 2, 4, 8, then every 15 s, until closeAll(); meanwhile each speaker's "state" reads
// "disconnected". closeAll() fires "closed".

import { rtcConfiguration } from "../ice-servers.js";
import { JanusError, JanusSession } from "./janus.js";
import { interpreterLanguage, interpretationStats, speakerStats } from "./sfu-stats.js";

export const PLUGIN = "janus.plugin.videoroom";
export const AGENT_DISPLAY = "rtc-agent";
export const RECONNECT_DELAYS_MS = [1000, 2000, 4000, 8000, 15000];
const MAX_FEEDS = 512; // publishers remembered per room (Janus's own `publishers` limit is far lower)

export class SfuMedia extends EventTarget {
  /**
   * @param {object} o
   * @param {object} o.sfu                room.joined's sfu: {url, room, token, display, interpreter_feeds}
   * @param {boolean} o.publish           whether to publish my camera and microphone (speakers; not listeners)
   * @param {MediaStream|null} o.stream   my camera and microphone
   * @param {object} [o.rtcConfig]        ICE servers (RtcClient.fetchIceServers)
   * @param {string|null} [o.interpretation]  the listen language whose interpreter feed to receive, or null
   * @param {object} [o.log]              the page's event log ({note(text, level)})
   */
  constructor({ sfu, publish, stream, rtcConfig = {}, interpretation = null, log = null }) {
    super();
    this.sfu = { ...sfu, interpreter_feeds: { ...(sfu.interpreter_feeds || {}) } };
    this.publish = Boolean(publish);
    this.stream = stream;
    this.rtcConfig = rtcConfig;
    this.interpretation = interpretation;
    this.log = log;
    this.closed = false;
    this.attempt = 0;
    this.joins = 0; // successful joins of the Janus room (1 + reconnects)
    this._reset();
  }

  _reset() {
    this.session = null;
    this.pubHandle = null;
    this.subHandle = null;
    this.pubPc = null;
    this.subPc = null;
    this.myFeedId = null;
    this.privateId = null;
    this.feeds = new Map(); // Janus feed id -> {id, display}
    this.subStreams = new Map(); // subscriber mid -> {feed_id, feed_display, type, active}
    this.streams = new Map(); // speaker id -> MediaStream of its subscribed tracks
    this.interpretationStream = null;
    this._queue = Promise.resolve();
    this._syncing = false;
    this._syncAgain = false;
  }

  _emit(name, detail) {
    this.dispatchEvent(new CustomEvent(name, { detail }));
  }

  _note(text, level = "info") {
    if (this.log) this.log.note(`SFU: ${text}`, level);
  }

  /** Join the Janus room (and publish); a failure is retried (see the module). Resolves once the first try ends. */
  async start() {
    try {
      await this._open();
      this.attempt = 0;
    } catch (err) {
      this._fault(err);
    }
    return this;
  }

  async _open() {
    const session = new JanusSession(this.sfu.url);
    this.session = session;
    await session.connect();
    if (this.closed || this.session !== session) {
      session.close();
      return;
    }
    session.addEventListener("lost", ({ detail }) => {
      if (this.session === session) this._fault(new JanusError(detail.reason));
    });
    const pub = await session.attach(PLUGIN);
    this.pubHandle = pub;
    pub.addEventListener("event", ({ detail }) => this._onRoomEvent(detail.data));
    const { data } = await pub.message({ request: "join", ptype: "publisher", room: this.sfu.room,
      display: this.sfu.display, token: this.sfu.token }, null, { waitEvent: true });
    this.myFeedId = data.id;
    this.privateId = data.private_id;
    for (const p of data.publishers || []) this._publisherSeen(p);
    if (this.publish && this.stream && this.stream.getTracks().length) await this._publishOwn(pub);
    this.joins += 1;
    this._note(`joined room ${this.sfu.room}${this.publish ? " and published" : " (listening)"}`);
    this._sync();
  }

  async _publishOwn(pub) {
    const pc = new RTCPeerConnection(rtcConfiguration(this.rtcConfig));
    this.pubPc = pc;
    for (const track of this.stream.getTracks()) pc.addTransceiver(track, { direction: "sendonly", streams: [this.stream] });
    pc.addEventListener("icecandidate", ({ candidate }) => pub.trickle(candidate ? candidate.toJSON() : null));
    pc.addEventListener("connectionstatechange", () => {
      this._emit("published", { state: pc.connectionState });
      if (pc.connectionState === "failed" && this.pubPc === pc) this._fault(new JanusError("publishing failed (ICE)"));
    });
    await pc.setLocalDescription(await pc.createOffer());
    const { jsep } = await pub.message({ request: "publish", display: this.sfu.display },
      { type: "offer", sdp: pc.localDescription.sdp }, { waitEvent: true });
    if (!jsep || jsep.type !== "answer") throw new JanusError("the SFU did not answer our media");
    await pc.setRemoteDescription({ type: "answer", sdp: jsep.sdp });
  }

  // ---------------------------------------------------------------- who publishes

  _onRoomEvent(data) {
    for (const p of data.publishers || []) this._publisherSeen(p);
    for (const key of ["unpublished", "leaving"]) {
      const gone = data[key];
      if (typeof gone === "number" && this.feeds.delete(gone)) this._sync();
    }
    if (data.videoroom === "destroyed") this._note("the SFU room ended", "warn");
  }

  _publisherSeen(p) {
    if (!p || typeof p.id !== "number" || p.id === this.myFeedId || p.dummy) return;
    if (!this.feeds.has(p.id) && this.feeds.size >= MAX_FEEDS) return;
    this.feeds.set(p.id, { id: p.id, display: String(p.display || "") });
    this._sync();
  }

  /** The feeds to receive: every speaker but me and rtc-agent, and the interpreter feed of my language. */
  _wanted() {
    const want = new Set();
    const interpreterId = this.interpretation ? this.sfu.interpreter_feeds[this.interpretation] : null;
    for (const { id, display } of this.feeds.values()) {
      if (display === this.sfu.display || display === AGENT_DISPLAY) continue;
      const language = interpreterLanguage(display);
      if (language === null || (this.interpretation && (language === this.interpretation || id === interpreterId))) want.add(id);
    }
    return want;
  }

  /** The rtc-agent interpreter feeds now (room.sfu.updated's interpreter_feeds): {lang: feed id}. */
  setInterpreterFeeds(feeds) {
    this.sfu.interpreter_feeds = { ...(feeds || {}) };
    this._sync();
  }

  /** Receive the interpreter feed of `language` (null: none). */
  setInterpretation(language) {
    if (this.interpretation === language) return;
    this.interpretation = language || null;
    this._sync();
  }

  // ---------------------------------------------------------------- the subscription (serialized)

  _sync() {
    if (this.closed || !this.pubHandle) return;
    if (this._syncing) {
      this._syncAgain = true;
      return;
    }
    this._syncing = true;
    const session = this.session;
    (async () => {
      try {
        do {
          this._syncAgain = false;
          await this._syncOnce();
        } while (this._syncAgain && !this.closed && this.session === session);
      } catch (err) {
        if (this.session === session) this._fault(err);
      } finally {
        this._syncing = false;
      }
    })();
  }

  _subscribed() {
    const have = new Set();
    for (const s of this.subStreams.values()) {
      if (s.active !== false && typeof s.feed_id === "number" && this.feeds.has(s.feed_id)) have.add(s.feed_id);
    }
    return have;
  }

  async _syncOnce() {
    const want = this._wanted();
    const have = this._subscribed();
    const add = [...want].filter((id) => !have.has(id)).map((feed) => ({ feed }));
    const remove = [...have].filter((id) => !want.has(id)).map((feed) => ({ feed }));
    if (!add.length && !remove.length) return;
    if (!this.subHandle) {
      if (!add.length) return;
      const sub = await this.session.attach(PLUGIN);
      this.subHandle = sub;
      sub.addEventListener("event", ({ detail }) => this._enqueue(() => this._answer(detail.data, detail.jsep)));
      const reply = await sub.message({ request: "join", ptype: "subscriber", room: this.sfu.room, token: this.sfu.token,
        private_id: this.privateId, use_msid: false, streams: add }, null, { waitEvent: true });
      await this._enqueue(() => this._answer(reply.data, reply.jsep));
      return;
    }
    const body = { request: "update" };
    if (add.length) body.subscribe = add;
    if (remove.length) body.unsubscribe = remove;
    let reply;
    try {
      reply = await this.subHandle.message(body, null, { waitEvent: true });
    } catch (err) {
      if (!(err instanceof JanusError) || !this.session || !this.session.connected) throw err;
      this._note(`subscription update refused: ${err.message}`, "warn"); // a feed that went away meanwhile
      return;
    }
    await this._enqueue(() => this._answer(reply.data, reply.jsep));
  }

  _enqueue(fn) {
    const run = this._queue.then(fn);
    this._queue = run.catch(() => {});
    return run;
  }

  /** A subscriber event: its stream list, and Janus's offer (answered with "start"). */
  async _answer(data, jsep) {
    if (Array.isArray(data.streams)) {
      this.subStreams = new Map(data.streams.filter((s) => s && s.mid !== undefined).map((s) => [String(s.mid), s]));
    }
    if (!jsep || jsep.type !== "offer" || this.closed) {
      this._remap();
      return;
    }
    const pc = this._subscriberPc();
    await pc.setRemoteDescription({ type: "offer", sdp: jsep.sdp });
    await pc.setLocalDescription(await pc.createAnswer());
    await this.subHandle.message({ request: "start" }, { type: "answer", sdp: pc.localDescription.sdp }, { waitEvent: true });
    this._remap();
  }

  _subscriberPc() {
    if (this.subPc) return this.subPc;
    const pc = new RTCPeerConnection(rtcConfiguration(this.rtcConfig));
    this.subPc = pc;
    const sub = this.subHandle;
    pc.addEventListener("icecandidate", ({ candidate }) => sub.trickle(candidate ? candidate.toJSON() : null));
    pc.addEventListener("track", () => this._remap());
    pc.addEventListener("connectionstatechange", () => {
      for (const id of this.streams.keys()) this._emit("state", { id, state: pc.connectionState });
      if (pc.connectionState === "failed" && this.subPc === pc) this._fault(new JanusError("receiving failed (ICE)"));
    });
    return pc;
  }

  /** Put every receiving transceiver's track into its speaker's stream (or the interpretation stream). */
  _remap() {
    if (!this.subPc) return;
    const owners = new Map(); // track -> speaker id | {language}
    for (const t of this.subPc.getTransceivers()) {
      const s = this.subStreams.get(String(t.mid));
      if (!s || s.active === false || !t.receiver.track) continue;
      const display = s.feed_display || this.feeds.get(s.feed_id)?.display || "";
      const language = interpreterLanguage(display);
      if (language !== null) owners.set(t.receiver.track, { language });
      else if (display && display !== AGENT_DISPLAY) owners.set(t.receiver.track, display);
    }
    for (const [id, stream] of this.streams) {
      for (const track of stream.getTracks()) if (owners.get(track) !== id) stream.removeTrack(track);
      if (!stream.getTracks().length) {
        this.streams.delete(id);
        this._emit("close", { id });
      }
    }
    let interpretation = null;
    for (const [track, owner] of owners) {
      if (typeof owner === "string") {
        let stream = this.streams.get(owner);
        if (!stream) {
          stream = new MediaStream();
          this.streams.set(owner, stream);
        }
        if (!stream.getTracks().includes(track)) {
          stream.addTrack(track);
          this._emit("track", { id: owner, stream, track });
        }
      } else if (track.kind === "audio") {
        interpretation = { language: owner.language, track };
      }
    }
    const current = this.interpretationStream && this.interpretationStream.getAudioTracks()[0];
    if ((interpretation && interpretation.track) !== current) {
      this.interpretationStream = interpretation ? new MediaStream([interpretation.track]) : null;
      this._emit("interpretation", { language: interpretation ? interpretation.language : null,
        stream: this.interpretationStream });
    }
  }

  // ---------------------------------------------------------------- faults and reconnecting

  _fault(err) {
    if (this.closed) return;
    const delay = RECONNECT_DELAYS_MS[Math.min(this.attempt, RECONNECT_DELAYS_MS.length - 1)];
    this.attempt += 1;
    this._note(`${err.message || err}; joining again in ${delay / 1000} s`, "warn");
    for (const id of this.streams.keys()) this._emit("state", { id, state: "disconnected" });
    this._teardown();
    if (this.interpretationStream) this._emit("interpretation", { language: null, stream: null });
    this._reset();
    clearTimeout(this._retry);
    this._retry = setTimeout(() => {
      if (!this.closed) this.start();
    }, delay);
  }

  _teardown() {
    for (const pc of [this.pubPc, this.subPc]) {
      if (pc) pc.close();
    }
    if (this.session) this.session.close();
  }

  // ---------------------------------------------------------------- the room-media shape (mesh-media.js)

  connect() {} // Janus tells who publishes: nothing to start per participant

  handleSignal() {} // no room.signal in an SFU room

  close() {} // a speaker's feed ends when Janus says so (unpublished / leaving)

  /** Swap my microphone or camera track on the published connection (no renegotiation). */
  async replaceTrack(kind, track) {
    if (!this.pubPc) return;
    const transceiver = this.pubPc.getTransceivers().find((t) => t.receiver.track && t.receiver.track.kind === kind);
    if (transceiver) await transceiver.sender.replaceTrack(track).catch(() => {});
  }

  /** Leave the Janus room for good (the session ended or I left). */
  closeAll() {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this._retry);
    this._teardown();
    this.streams.clear();
    this._emit("closed", {});
  }

  /** Per speaker: {state, framesDecoded, audioEnergy, audioBytes} (call/sfu-stats.js). */
  stats() {
    return speakerStats(this);
  }

  /** The interpreter feed received now: {language, audioBytes, audioEnergy, published} (call/sfu-stats.js). */
  interpretationStats() {
    return interpretationStats(this);
  }
}
