// A small client of the Janus WebRTC server's API over its WebSocket transport (subprotocol "janus-protocol"),
// for the call page's SFU rooms (call/sfu.js). One JanusSession is one WebSocket carrying one Janus session:
// connect() opens both, a keepalive goes every `keepaliveMs` (Janus drops a session silent for 60 s), close()
// destroys the session and closes the socket. attach(plugin) gives a JanusHandle for plugin messages.
//
// Requests are matched to replies by `transaction`. A request is answered by "success" (a synchronous plugin
// reply), "error", or "ack" followed later by an "event" with the same transaction (an asynchronous plugin reply,
// e.g. a VideoRoom join): `waitEvent: true` waits for that event. Messages no pending request claims (a
// VideoRoom "publishers" event, Janus's own renegotiation offer, "trickle", "webrtcup", "hangup", "media") go to
// the handle's "event" listeners as {data, jsep, message}. Every failure is a JanusError (Janus's error, a plugin
// error, a timeout, a lost connection); a lost connection also fires "lost" {reason} on the session once.
// No API secret is ever sent: browsers reach a Janus whose rooms are private and join with a per-participant
// token (the VideoRoom `allowed` list that rtc-agent keeps).

export const SUBPROTOCOL = "janus-protocol";
export const KEEPALIVE_MS = 25_000;
export const REQUEST_TIMEOUT_MS = 15_000;
const MAX_PENDING = 64; // requests in flight on one session: more is a bug, refused rather than queued

export class JanusError extends Error {
  /** `code`: Janus's numeric error code or the plugin's error_code, when there is one. */
  constructor(message, code = null) {
    super(message);
    this.name = "JanusError";
    this.code = code;
  }
}

let transactions = 0;
const nextTransaction = () => `t${Date.now().toString(36)}-${(transactions += 1)}`;

export class JanusHandle extends EventTarget {
  constructor(session, id, plugin) {
    super();
    this.session = session;
    this.id = id;
    this.plugin = plugin;
    this.detached = false;
  }

  /** A plugin message (and an offer or answer): the plugin's reply {data, jsep}. Throws JanusError. */
  async message(body, jsep = null, { waitEvent = false, timeoutMs } = {}) {
    const request = { janus: "message", handle_id: this.id, body };
    if (jsep) request.jsep = jsep;
    const reply = await this.session.request(request, { waitEvent, timeoutMs });
    return pluginReply(reply);
  }

  /** One local ICE candidate (RTCIceCandidate.toJSON()), or null: gathering is complete. */
  trickle(candidate) {
    const body = candidate ? { candidate } : { candidate: { completed: true } };
    return this.session.request({ janus: "trickle", handle_id: this.id, ...body }).catch(() => {});
  }

  /** Detach the handle (idempotent, never throws). */
  async detach() {
    if (this.detached) return;
    this.detached = true;
    this.session.handles.delete(this.id);
    if (this.session.connected) await this.session.request({ janus: "detach", handle_id: this.id }).catch(() => {});
  }

  _deliver(message) {
    const data = (message.plugindata && message.plugindata.data) || {};
    this.dispatchEvent(new CustomEvent("event", { detail: { data, jsep: message.jsep || null, message } }));
  }
}

function pluginReply(message) {
  const data = (message.plugindata && message.plugindata.data) || {};
  if (data.error_code || data.error) throw new JanusError(`the SFU refused: ${data.error || "unknown error"}`, data.error_code || null);
  return { data, jsep: message.jsep || null };
}

export class JanusSession extends EventTarget {
  /**
   * @param {string} url   the Janus WebSocket API (ws:// or wss://), as room.joined's sfu.url says
   * @param {object} [o]   {keepaliveMs, timeoutMs, WebSocketClass} (the last for tests)
   */
  constructor(url, { keepaliveMs = KEEPALIVE_MS, timeoutMs = REQUEST_TIMEOUT_MS, WebSocketClass = WebSocket } = {}) {
    super();
    this.url = url;
    this.keepaliveMs = keepaliveMs;
    this.timeoutMs = timeoutMs;
    this.WebSocketClass = WebSocketClass;
    this.ws = null;
    this.id = null;
    this.handles = new Map(); // handle id -> JanusHandle
    this._pending = new Map(); // transaction -> {resolve, reject, waitEvent, timer}
    this._keepalive = null;
    this.closed = false;
    this.lostReason = null;
  }

  get connected() {
    return Boolean(this.ws && this.ws.readyState === 1 && !this.lostReason && !this.closed);
  }

  /** Open the WebSocket and create the Janus session. Throws JanusError (the session is then closed). */
  async connect() {
    if (!/^wss?:\/\//.test(this.url)) throw new JanusError(`the SFU URL must be ws:// or wss://, got ${this.url}`);
    await new Promise((resolve, reject) => {
      let ws;
      try {
        ws = new this.WebSocketClass(this.url, SUBPROTOCOL);
      } catch (err) {
        reject(new JanusError(`cannot reach the SFU: ${err.message}`));
        return;
      }
      this.ws = ws;
      const timer = setTimeout(() => reject(new JanusError("the SFU did not answer in time")), this.timeoutMs);
      ws.addEventListener("open", () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
      ws.addEventListener("error", () => {
        clearTimeout(timer);
        reject(new JanusError(`cannot reach the SFU at ${this.url}`));
      }, { once: true });
      ws.addEventListener("message", (ev) => this._onMessage(ev.data));
      ws.addEventListener("close", () => this._lost("the SFU connection closed"));
    });
    try {
      const reply = await this.request({ janus: "create" }, { inSession: false });
      this.id = reply.data.id;
    } catch (err) {
      this.close();
      throw err;
    }
    this._keepalive = setInterval(() => {
      this.request({ janus: "keepalive" }).catch(() => {});
    }, this.keepaliveMs);
    return this;
  }

  /** A new handle on `plugin` (e.g. "janus.plugin.videoroom"). */
  async attach(plugin) {
    const reply = await this.request({ janus: "attach", plugin });
    const handle = new JanusHandle(this, reply.data.id, plugin);
    this.handles.set(handle.id, handle);
    return handle;
  }

  /** Send `message`; Janus's answer ("success", "ack", or with waitEvent the "event" of the same transaction). */
  request(message, { waitEvent = false, inSession = true, timeoutMs } = {}) {
    if (!this.connected) return Promise.reject(new JanusError(`not connected to the SFU (${this.lostReason || "closed"})`));
    if (this._pending.size >= MAX_PENDING) return Promise.reject(new JanusError("too many SFU requests in flight"));
    const transaction = nextTransaction();
    const out = { ...message, transaction };
    if (inSession) out.session_id = this.id;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._pending.delete(transaction);
        reject(new JanusError(`the SFU did not answer ${message.janus} in time`));
      }, timeoutMs || this.timeoutMs);
      this._pending.set(transaction, { resolve, reject, waitEvent, timer });
      this.ws.send(JSON.stringify(out));
    });
  }

  _onMessage(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return; // not JSON: nothing of ours
    }
    const kind = message.janus;
    const pending = message.transaction ? this._pending.get(message.transaction) : null;
    if (pending) {
      if (kind === "ack" && pending.waitEvent) return; // the event follows
      this._pending.delete(message.transaction);
      clearTimeout(pending.timer);
      if (kind === "error") {
        const error = message.error || {};
        pending.reject(new JanusError(`the SFU refused: ${error.reason || "unknown error"}`, error.code || null));
      } else {
        pending.resolve(message);
      }
      return;
    }
    if (kind === "timeout") {
      this._lost("the SFU session timed out");
      return;
    }
    const handle = this.handles.get(message.sender);
    if (handle) handle._deliver(message);
  }

  _lost(reason) {
    if (this.lostReason || this.closed) return;
    this.lostReason = reason;
    this._stop(reason);
    this.dispatchEvent(new CustomEvent("lost", { detail: { reason } }));
  }

  _stop(reason) {
    clearInterval(this._keepalive);
    this._keepalive = null;
    for (const { reject, timer } of this._pending.values()) {
      clearTimeout(timer);
      reject(new JanusError(reason));
    }
    this._pending.clear();
  }

  /** Destroy the Janus session and close the socket (idempotent, never throws). */
  close() {
    if (this.closed) return;
    if (this.connected && this.id !== null) {
      try {
        this.ws.send(JSON.stringify({ janus: "destroy", session_id: this.id, transaction: nextTransaction() }));
      } catch {
        /* the socket is going anyway */
      }
    }
    this.closed = true;
    this._stop("closed");
    this.handles.clear();
    if (this.ws) {
      try {
        this.ws.close();
      } catch {
        /* already closed */
      }
    }
  }
}
