// RtcClient: one WebRTC session with the rtc-agent server.
//
// Signaling (DESIGN.md section 3):
//   POST   /v1/tokens             -> 201 {value, expires_at, app, config}     (a single-use client token; the
//                                    page's same-origin sign-in cookie or open mode authorises it)
//   GET    /v1/ice-servers        -> {ice_servers, ice_transport_policy, ttl_s, expires_at, refresh_after_s}
//                                    (Bearer: the client token; ttl_s/expires_at null when nothing expires)
//   GET    /v1/sessions/{id}/ice-servers  the same, fresh, for a running session (its session token): the call
//                                    page's mesh refreshes its TURN credentials with it (ice-servers.js)
//   POST   /v1/sessions           -> 201 {session_id, session_token, sdp, type: "answer"}   (Bearer: the client
//                                    token; the offer is sent before ICE gathering ends)
//   PATCH  /v1/sessions/{id}      trickle ICE candidates, then {candidates: [], end_of_candidates: true}
//   DELETE /v1/sessions/{id}      on disconnect and on page unload (fetch keepalive)
//   (PATCH and DELETE carry the session's own token: Authorization: Bearer <session_token>.)
//
// Relay-only ICE for debugging TURN: the page URL's `?ice=relay` (or the `forceRelay` option) makes every
// connection relay-only whatever the server's ice_transport_policy says (it only narrows the choice). The
// server's own session connection is not restarted (aiortc has no ICE restart): a failed one ends the session.
//
// A 503 with Retry-After (the server is at capacity) is retried on its own, up to `maxRetries` times.
//
// Events (DESIGN.md section 4) travel as JSON on the data channel labelled "events". Server events are
// dispatched to listeners registered with `client.on(type, fn)`; `client.on("*", fn)` sees every event.
// Lifecycle notifications (state changes, remote tracks, RTT, errors) are DOM events on the client itself
// (it is an EventTarget): "statechange", "track", "rtt", "error", "sent", "received".

import { rtcConfiguration } from "./ice-servers.js";

/** The page URL asks for relay-only ICE (`?ice=relay`), for debugging TURN. */
export function relayRequestedByPage() {
  return typeof location !== "undefined" && new URLSearchParams(location.search).get("ice") === "relay";
}

export const STATES = Object.freeze(["idle", "connecting", "connected", "disconnected", "failed"]);

let eventCounter = 0;

/** A client-side event id: short, unique within the page, sortable by creation order. */
export function newEventId(prefix = "evt_c") {
  eventCounter += 1;
  const rand = Math.random().toString(36).slice(2, 8);
  return `${prefix}_${Date.now().toString(36)}${eventCounter.toString(36)}${rand}`;
}

/** An error carrying the server's {type, code, message} and the HTTP status, when there is one. */
export class AgentError extends Error {
  constructor(message, { type = "client_error", code = "client_error", status = 0, retryAfter = null } = {}) {
    super(message);
    this.name = "AgentError";
    this.type = type;
    this.code = code;
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

async function errorFromResponse(res, what) {
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  const err = body && typeof body === "object" && body.error ? body.error : {};
  const retry = res.headers.get("Retry-After");
  const retryAfter = retry !== null && retry !== "" && !Number.isNaN(Number(retry)) ? Number(retry) : null;
  let message = err.message || `${what} failed: HTTP ${res.status} ${res.statusText || ""}`.trim();
  if (res.status === 503 && retryAfter !== null) {
    message += ` (retry after ${retryAfter} s)`;
  }
  return new AgentError(message, {
    type: err.type || "http_error",
    code: err.code || `http_${res.status}`,
    status: res.status,
    retryAfter,
  });
}

export class RtcClient extends EventTarget {
  /**
   * @param {object} opts
   * @param {string} opts.app                  app name sent in the offer ("echo", "captions", ...)
   * @param {string} [opts.baseUrl]            server origin; "" means the page's own origin
   * @param {number} [opts.heartbeatIntervalMs]
   * @param {object} [opts.sessionConfig]      sent as `config` in the offer
   * @param {number} [opts.connectTimeoutMs]   give up when not connected after this long
   * @param {boolean} [opts.forceRelay]        relay-only ICE (default: the page URL has ?ice=relay)
   */
  constructor({ app, baseUrl = "", heartbeatIntervalMs = 2000, sessionConfig = {}, connectTimeoutMs = 30000,
                maxRetries = 3, forceRelay = relayRequestedByPage() } = {}) {
    super();
    this.forceRelay = Boolean(forceRelay);
    this.maxRetries = maxRetries;
    this.sessionToken = null;
    this.endReason = null; // {reason, message} of session.ended
    this.app = app;
    this.baseUrl = baseUrl.replace(/\/$/, "");
    this.heartbeatIntervalMs = heartbeatIntervalMs;
    this.sessionConfig = sessionConfig || {};
    this.connectTimeoutMs = connectTimeoutMs;

    this.state = "idle";
    this.sessionId = null;
    this.session = null; // the `session` object of session.created
    this.pc = null;
    this.dc = null;
    this.remoteStream = null;
    this.senders = { audio: null, video: null };
    this.rtt = { last: null, avg: null, count: 0 };
    this.lastError = null;

    this._listeners = new Map();
    this._heartbeat = null;
    this._connectTimer = null;
    this._pendingCandidates = [];
    this._gatheringDone = false;
    this._endOfCandidatesSent = false;
    this._patchChain = Promise.resolve();
    this._flushScheduled = false;
    this._generation = 0; // bumps on every connect/teardown so stale callbacks do nothing
    this._closing = false;
  }

  // ---------------------------------------------------------------- listeners

  /** Listen to server events of one `type` ("*" for all). Returns a function that removes the listener. */
  on(type, fn) {
    if (!this._listeners.has(type)) this._listeners.set(type, new Set());
    this._listeners.get(type).add(fn);
    return () => this.off(type, fn);
  }

  off(type, fn) {
    const set = this._listeners.get(type);
    if (set) set.delete(fn);
  }

  _dispatch(event) {
    for (const key of [event.type, "*"]) {
      const set = this._listeners.get(key);
      if (!set) continue;
      for (const fn of [...set]) {
        try {
          fn(event, this);
        } catch (err) {
          console.error(`listener for ${key} failed`, err);
        }
      }
    }
  }

  _emit(name, detail) {
    this.dispatchEvent(new CustomEvent(name, { detail }));
  }

  // ---------------------------------------------------------------- state

  _setState(state) {
    if (!STATES.includes(state)) throw new Error(`unknown state ${state}`);
    if (this.state === state) return;
    const previous = this.state;
    this.state = state;
    this._emit("statechange", { state, previous });
  }

  _updateConnected() {
    if (!this.pc || this._closing) return;
    const pcState = this.pc.connectionState;
    const dcOpen = this.dc && this.dc.readyState === "open";
    if (pcState === "failed") {
      this._fail(new AgentError("The peer connection failed (ICE or DTLS). Check network / TURN settings.", {
        code: "peer_connection_failed",
      }));
      return;
    }
    if (pcState === "closed") {
      this._teardown("disconnected", { sendDelete: false });
      return;
    }
    if (pcState === "connected" && dcOpen) {
      clearTimeout(this._connectTimer);
      this._connectTimer = null;
      this._setState("connected");
    } else if (this.state === "connected") {
      // peer "disconnected" is transient in WebRTC: it can come back. Show it, keep the session.
      this._setState(pcState === "disconnected" ? "disconnected" : "connecting");
    }
  }

  get connected() {
    return this.state === "connected";
  }

  /** A plain snapshot for debugging and tests. */
  snapshot() {
    return {
      state: this.state,
      sessionId: this.sessionId,
      app: this.app,
      rtt: { ...this.rtt },
      pcState: this.pc ? this.pc.connectionState : null,
      iceState: this.pc ? this.pc.iceConnectionState : null,
      iceGatheringState: this.pc ? this.pc.iceGatheringState : null,
      dcState: this.dc ? this.dc.readyState : null,
      lastError: this.lastError ? { message: this.lastError.message, code: this.lastError.code } : null,
    };
  }

  // ---------------------------------------------------------------- HTTP

  _url(path) {
    return `${this.baseUrl}${path}`;
  }

  /** A single-use client token for one session of this app (POST /v1/tokens). */
  async fetchClientToken() {
    const res = await fetch(this._url("/v1/tokens"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ app: this.app }),
    });
    if (!res.ok) throw await errorFromResponse(res, "POST /v1/tokens");
    return (await res.json()).value;
  }

  /** ICE servers for a new connection: {iceServers, iceTransportPolicy, ttlS, expiresAt (ms), refreshAfterS,
   * receivedAt (ms)} (ice-servers.js). `token`: a client or join token; none: the page sign-in or open mode. */
  fetchIceServers(token) {
    return this._fetchIceConfig("/v1/ice-servers", token);
  }

  /** Fresh ICE servers while a session runs (its own token, so they outlive the used-up client token);
   * before the session exists, the same as fetchIceServers() with the page's sign-in. */
  refreshIceServers() {
    if (!this.sessionId || !this.sessionToken) return this.fetchIceServers(null);
    return this._fetchIceConfig(`/v1/sessions/${encodeURIComponent(this.sessionId)}/ice-servers`, this.sessionToken);
  }

  async _fetchIceConfig(path, token) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(this._url(path), { headers });
    if (!res.ok) throw await errorFromResponse(res, `GET ${path.replace(/sess_[^/]+/, "{id}")}`);
    const body = await res.json();
    const iceServers = (body.ice_servers || []).map((s) => {
      const server = { urls: s.urls };
      if (s.username !== undefined && s.username !== null) server.username = s.username;
      if (s.credential !== undefined && s.credential !== null) server.credential = s.credential;
      return server;
    });
    const relay = this.forceRelay || body.ice_transport_policy === "relay";
    return {
      iceServers,
      iceTransportPolicy: relay ? "relay" : "all",
      ttlS: typeof body.ttl_s === "number" ? body.ttl_s : null,
      expiresAt: typeof body.expires_at === "number" ? body.expires_at * 1000 : null,
      refreshAfterS: typeof body.refresh_after_s === "number" ? body.refresh_after_s : null,
      receivedAt: Date.now(),
    };
  }

  // ---------------------------------------------------------------- connect

  /**
   * Open a session. `audioTrack` / `videoTrack` are local MediaStreamTracks (either may be null).
   * `stream` is the MediaStream they belong to (used for the msid); optional.
   * Resolves once the answer is applied; watch "statechange" for "connected".
   */
  async connect(options = {}) {
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await this._connectOnce(options);
      } catch (err) {
        const busy = err instanceof AgentError && err.status === 503 && err.retryAfter !== null;
        if (!busy || attempt >= this.maxRetries) throw err;
        const wait = Math.min(30, Math.max(1, err.retryAfter));
        this._emit("log", { level: "warn", message: `${err.message}; retrying in ${wait} s` });
        this._emit("retry", { attempt: attempt + 1, waitS: wait, error: err });
        await new Promise((resolve) => setTimeout(resolve, wait * 1000));
      }
    }
  }

  async _connectOnce({ audioTrack = null, videoTrack = null, stream = null, config = null } = {}) {
    if (this.state === "connecting" || this.state === "connected") {
      throw new AgentError("Already connected or connecting", { code: "already_connected" });
    }
    this._reset();
    const generation = this._generation;
    this._setState("connecting");
    this._connectTimer = setTimeout(() => {
      if (generation !== this._generation || this.state === "connected") return;
      this._fail(new AgentError(`Not connected after ${Math.round(this.connectTimeoutMs / 1000)} s`, {
        code: "connect_timeout",
      }));
    }, this.connectTimeoutMs);

    try {
      const token = await this.fetchClientToken();
      if (generation !== this._generation) return;
      let rtcConfig = { iceServers: [], iceTransportPolicy: this.forceRelay ? "relay" : "all" };
      try {
        rtcConfig = rtcConfiguration(await this.fetchIceServers(token));
      } catch (err) {
        // Without ICE servers host candidates still work on a LAN; say so and go on.
        this._emit("log", { level: "warn", message: `ICE servers unavailable: ${err.message}` });
      }
      if (generation !== this._generation) return;

      const pc = new RTCPeerConnection(rtcConfig);
      this.pc = pc;

      // The data channel must exist before the offer so that the SCTP m-line is negotiated.
      const dc = pc.createDataChannel("events", { ordered: true });
      this.dc = dc;
      this._wireDataChannel(dc, generation);

      const localStream = stream || new MediaStream([audioTrack, videoTrack].filter(Boolean));
      // Audio is always sendrecv: the server answers on the same m-line with its outgoing speech track.
      const audioTx = audioTrack
        ? pc.addTransceiver(audioTrack, { direction: "sendrecv", streams: [localStream] })
        : pc.addTransceiver("audio", { direction: "recvonly" });
      this.senders.audio = audioTx.sender;
      if (videoTrack) {
        const videoTx = pc.addTransceiver(videoTrack, { direction: "sendonly", streams: [localStream] });
        this.senders.video = videoTx.sender;
      }

      pc.addEventListener("track", (ev) => {
        if (generation !== this._generation) return;
        if (ev.track.kind !== "audio") return;
        const remote = ev.streams && ev.streams[0] ? ev.streams[0] : new MediaStream([ev.track]);
        this.remoteStream = remote;
        this._emit("track", { track: ev.track, stream: remote });
      });
      pc.addEventListener("icecandidate", (ev) => {
        if (generation !== this._generation) return;
        this._onIceCandidate(ev.candidate);
      });
      pc.addEventListener("icegatheringstatechange", () => {
        if (generation !== this._generation) return;
        if (pc.iceGatheringState === "complete") this._onIceCandidate(null);
      });
      pc.addEventListener("connectionstatechange", () => {
        if (generation !== this._generation) return;
        this._emit("log", { level: "info", message: `peer connection: ${pc.connectionState}` });
        this._updateConnected();
      });
      pc.addEventListener("iceconnectionstatechange", () => {
        if (generation !== this._generation) return;
        this._emit("log", { level: "debug", message: `ICE: ${pc.iceConnectionState}` });
      });

      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      if (generation !== this._generation) return;

      // Trickle ICE: send the offer now, candidates follow with PATCH.
      const body = {
        app: this.app,
        sdp: pc.localDescription.sdp,
        type: "offer",
        config: config || this.sessionConfig || {},
      };
      const res = await fetch(this._url("/v1/sessions"), {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json", Authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      });
      if (!res.ok) throw await errorFromResponse(res, "POST /v1/sessions");
      const answer = await res.json();
      if (generation !== this._generation) {
        // Disconnected while the offer was in flight: end the session we just got.
        if (answer.session_id) this._deleteSession(answer.session_id, answer.session_token, false);
        return;
      }
      this.sessionId = answer.session_id;
      this.sessionToken = answer.session_token || null;
      this._emit("session", { sessionId: this.sessionId });
      await pc.setRemoteDescription({ type: answer.type || "answer", sdp: answer.sdp });
      this._scheduleCandidateFlush();
    } catch (err) {
      if (generation === this._generation) this._fail(err);
      throw err;
    }
  }

  _wireDataChannel(dc, generation) {
    dc.addEventListener("open", () => {
      if (generation !== this._generation) return;
      this._emit("log", { level: "info", message: "data channel open" });
      this._startHeartbeat(generation);
      this._updateConnected();
    });
    dc.addEventListener("close", () => {
      if (generation !== this._generation || this._closing) return;
      this._emit("log", { level: "warn", message: "data channel closed by the server" });
      this._teardown("disconnected", { sendDelete: true });
    });
    dc.addEventListener("message", (ev) => {
      if (generation !== this._generation) return;
      this._onMessage(ev.data);
    });
  }

  _onMessage(data) {
    let event;
    try {
      event = JSON.parse(typeof data === "string" ? data : new TextDecoder().decode(data));
    } catch {
      this._emit("log", { level: "warn", message: `unparseable message: ${String(data).slice(0, 200)}` });
      return;
    }
    if (!event || typeof event !== "object" || typeof event.type !== "string") {
      this._emit("log", { level: "warn", message: "message without a type" });
      return;
    }
    if (event.type === "pong" && typeof event.client_ts === "number") {
      const rtt = performance.now() - event.client_ts;
      if (rtt >= 0 && rtt < 60000) {
        this.rtt.last = rtt;
        this.rtt.count += 1;
        // Exponential smoothing, seeded with the first sample.
        this.rtt.avg = this.rtt.avg === null ? rtt : this.rtt.avg * 0.8 + rtt * 0.2;
        this._emit("rtt", { ...this.rtt });
      }
    } else if (event.type === "session.created" && event.session) {
      this.session = event.session;
      if (!this.sessionId && event.session.id) this.sessionId = event.session.id;
    } else if (event.type === "session.ended") {
      this.endReason = { reason: event.reason || "ended", message: event.message || "" };
      this._emit("ended", { ...this.endReason });
    } else if (event.type === "error") {
      const e = event.error || {};
      this._emit("error", {
        error: new AgentError(e.message || "server error", { type: e.type, code: e.code }),
        fromServer: true,
      });
    }
    this._emit("received", event);
    this._dispatch(event);
  }

  // ---------------------------------------------------------------- trickle ICE

  _onIceCandidate(candidate) {
    if (candidate && candidate.candidate) {
      this._pendingCandidates.push({
        candidate: candidate.candidate,
        sdpMid: candidate.sdpMid,
        sdpMLineIndex: candidate.sdpMLineIndex,
      });
    } else if (!candidate || candidate.candidate === "") {
      this._gatheringDone = true;
    }
    this._scheduleCandidateFlush();
  }

  _scheduleCandidateFlush() {
    if (this._flushScheduled) return;
    this._flushScheduled = true;
    // Batch candidates gathered in the same tick into one PATCH.
    setTimeout(() => {
      this._flushScheduled = false;
      this._flushCandidates();
    }, 0);
  }

  _flushCandidates() {
    if (!this.sessionId) return; // buffered until the answer arrives
    const id = this.sessionId;
    const generation = this._generation;
    if (this._pendingCandidates.length) {
      // The server takes at most 20 candidates a PATCH.
      while (this._pendingCandidates.length) {
        this._patch(id, { candidates: this._pendingCandidates.splice(0, 20) }, generation);
      }
    }
    if (this._gatheringDone && !this._endOfCandidatesSent) {
      this._endOfCandidatesSent = true;
      this._patch(id, { candidates: [], end_of_candidates: true }, generation);
    }
  }

  _sessionHeaders(token = this.sessionToken) {
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  _patch(id, body, generation) {
    // Serialized so that end_of_candidates always arrives after the candidates.
    this._patchChain = this._patchChain.then(async () => {
      if (generation !== this._generation) return;
      try {
        const res = await fetch(this._url(`/v1/sessions/${encodeURIComponent(id)}`), {
          method: "PATCH",
          headers: { "Content-Type": "application/json", ...this._sessionHeaders() },
          body: JSON.stringify(body),
        });
        if (!res.ok) {
          const err = await errorFromResponse(res, "PATCH /v1/sessions");
          this._emit("log", { level: "warn", message: `trickle ICE: ${err.message}` });
        }
      } catch (err) {
        this._emit("log", { level: "warn", message: `trickle ICE: ${err.message}` });
      }
    });
    return this._patchChain;
  }

  // ---------------------------------------------------------------- events out

  /** Send a client event; adds an event_id when missing. Returns the event sent, or null when not open. */
  send(event) {
    if (!event || typeof event.type !== "string") throw new TypeError("event needs a string `type`");
    if (!this.dc || this.dc.readyState !== "open") return null;
    const out = { event_id: newEventId(), ...event };
    this.dc.send(JSON.stringify(out));
    this._emit("sent", out);
    return out;
  }

  _startHeartbeat(generation) {
    clearInterval(this._heartbeat);
    const ping = () => {
      if (generation !== this._generation) return;
      this.send({ type: "ping", event_id: newEventId("ping"), client_ts: performance.now() });
    };
    ping();
    this._heartbeat = setInterval(ping, this.heartbeatIntervalMs);
  }

  // ---------------------------------------------------------------- tracks

  /** Switch the live mic or camera track (kind "audio" | "video") without renegotiation. */
  async replaceTrack(kind, track) {
    const sender = this.senders[kind];
    if (!sender) return false;
    await sender.replaceTrack(track);
    return true;
  }

  // ---------------------------------------------------------------- teardown

  _fail(err) {
    const error = err instanceof AgentError ? err : new AgentError(err && err.message ? err.message : String(err));
    this.lastError = error;
    this._emit("error", { error, fromServer: false });
    this._teardown("failed", { sendDelete: true });
  }

  _deleteSession(id, token, keepalive) {
    try {
      const headers = this._sessionHeaders(token);
      return fetch(this._url(`/v1/sessions/${encodeURIComponent(id)}`), { method: "DELETE", keepalive, headers })
        .catch(() => {});
    } catch {
      return Promise.resolve();
    }
  }

  _teardown(finalState, { sendDelete = true, keepalive = false } = {}) {
    this._closing = true;
    clearInterval(this._heartbeat);
    clearTimeout(this._connectTimer);
    this._heartbeat = null;
    this._connectTimer = null;
    const id = this.sessionId;
    let deletion = Promise.resolve();
    if (sendDelete && id) deletion = this._deleteSession(id, this.sessionToken, keepalive);
    this._generation += 1; // stale callbacks from the old pc stop here
    try {
      if (this.dc) this.dc.close();
    } catch {
      /* already closed */
    }
    try {
      if (this.pc) this.pc.close();
    } catch {
      /* already closed */
    }
    this.dc = null;
    this.pc = null;
    this.senders = { audio: null, video: null };
    this._pendingCandidates = [];
    this._closing = false;
    this._setState(finalState);
    return deletion;
  }

  _reset() {
    this._generation += 1;
    this.sessionId = null;
    this.sessionToken = null;
    this.endReason = null;
    this.session = null;
    this.remoteStream = null;
    this.rtt = { last: null, avg: null, count: 0 };
    this.lastError = null;
    this._pendingCandidates = [];
    this._gatheringDone = false;
    this._endOfCandidatesSent = false;
    this._patchChain = Promise.resolve();
  }

  /** End the session (DELETE) and close the peer connection. */
  async disconnect({ keepalive = false } = {}) {
    if (!this.pc && this.state !== "connecting") return;
    await this._teardown("disconnected", { sendDelete: true, keepalive });
  }
}
