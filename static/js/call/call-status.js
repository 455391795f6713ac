// The call's one connection state, derived from the facts (the client's state, whether the room was joined, a
// rejoin pending, why the last session ended), so two displays can never disagree: the call card's badge and the
// sidebar's state badge (page.js `showConnection`) show the same words, and body[data-call-phase] says which
// screen is up (the pre-join form, or the call).
//
// Phases: "prejoin" (not in a call: never joined, or left), "connecting", "connected", "unstable" (the
// connection dropped for a moment; WebRTC may bring it back), "reconnecting" (a rejoin is scheduled: "reconnecting
// in N s", or running), "ended" (the session ended for good, with its reason; the pre-join form is up to rejoin).

/** Words for session.ended reasons and refusals. */
const REASON_WORDS = {
  heartbeat_lost: "connection lost", ice_failed: "connection failed", peer_closed: "connection closed",
  server_shutdown: "the server restarted", internal_error: "a server error", max_duration: "time limit reached",
  deleted: "left", connect_timeout: "could not connect", refused: "refused",
};

export function reasonText(reason) {
  return REASON_WORDS[reason] || String(reason || "ended").replace(/_/g, " ");
}

/** {phase, text, state}: `state` is the state badge's look (idle, connecting, connected, failed). */
export function deriveStatus(f) {
  if (f.reconnect) {
    const text = f.reconnect.waitS > 0 ? `reconnecting in ${f.reconnect.waitS} s` : "reconnecting…";
    return { phase: "reconnecting", text, state: "connecting" };
  }
  if (f.client === "connected") {
    return f.joined ? { phase: "connected", text: "connected", state: "connected" }
      : { phase: "connecting", text: "joining…", state: "connecting" };
  }
  if (f.client === "connecting") return { phase: "connecting", text: "connecting…", state: "connecting" };
  if (f.client === "disconnected" && f.hasPeer) return { phase: "unstable", text: "reconnecting…", state: "connecting" };
  if (f.ended) return { phase: "ended", text: `ended: ${reasonText(f.ended)}`, state: "failed" };
  return { phase: "prejoin", text: f.leftAt ? "you left the call" : "not in the call", state: "idle" };
}

export class CallStatus extends EventTarget {
  /** `badge`: the call card's status element; `show({text, state})`: the page's state badge (page.js). */
  constructor({ badge, show }) {
    super();
    this._badge = badge;
    this._show = show;
    this.facts = { client: "idle", joined: false, hasPeer: false, reconnect: null, ended: null, leftAt: null };
    this.current = deriveStatus(this.facts);
    this._render();
  }

  get phase() {
    return this.current.phase;
  }

  /** Change some facts; the status is derived again and shown everywhere; "change" fires when the phase changes. */
  update(facts) {
    Object.assign(this.facts, facts);
    const before = this.current;
    this.current = deriveStatus(this.facts);
    this._render();
    if (before.phase !== this.current.phase || before.text !== this.current.text) {
      this.dispatchEvent(new CustomEvent("change", { detail: { ...this.current, previous: before.phase } }));
    }
  }

  _render() {
    const { phase, text, state } = this.current;
    if (this._badge) {
      this._badge.textContent = text;
      this._badge.dataset.state = state;
      this._badge.dataset.phase = phase;
    }
    document.body.dataset.callPhase = phase;
    this._show({ text, state });
  }
}
