// Rejoining a call by itself when the server goes away for a moment (a restart, a lost heartbeat, a network
// fault): backing off 1, 2, 4, 8, 15, then every 30 s, until the user leaves. A refusal is final. A node that is
// shutting down ends the session with server_shutdown after draining and answers new offers 503 server_draining
// meanwhile (a 5xx: retried), so the page comes back on the next node or once this one has restarted, in the
// same meeting (the join link and the transcript are in the state store).
// It draws nothing itself: `changed({waitS, why})` says how long until the next try (counting down each second;
// waitS 0 while the try runs) and `changed(null)` that no rejoin is pending; call-status.js shows it.

const DELAYS_S = [1, 2, 4, 8, 15, 30];

/** The session.ended reasons worth rejoining after. */
export const RECONNECT_REASONS = new Set(["server_shutdown", "heartbeat_lost", "internal_error", "ice_failed", "peer_closed",
  "room_moved"]);

export class Reconnector {
  /** `join()` rejoins; `changed(pending)` hears the countdown (see the module); `log` notes it. */
  constructor({ join, changed, log }) {
    this._join = join;
    this._changed = changed;
    this._log = log;
    this.left = true; // the user left (or never joined): nothing to rejoin
    this._attempt = 0;
    this._timer = null;
    this._tick = null;
    this._why = "";
  }

  /** Whether a rejoin is scheduled or its try is running. */
  get pending() {
    return this._timer !== null || this._running === true;
  }

  /** Rejoin after the next delay, saying `why` (nothing when the user left or one is already scheduled). */
  schedule(why) {
    if (this.left || this._timer !== null) return;
    const delay = DELAYS_S[Math.min(this._attempt, DELAYS_S.length - 1)];
    this._attempt += 1;
    this._why = why;
    this._log.note(`${why}: reconnecting in ${delay} s`, "warn");
    const due = Date.now() + delay * 1000;
    const report = () => this._changed({ waitS: Math.max(1, Math.ceil((due - Date.now()) / 1000)), why });
    report();
    this._tick = setInterval(report, 1000);
    this._timer = setTimeout(async () => {
      clearInterval(this._tick);
      this._timer = this._tick = null;
      this._running = true;
      this._changed({ waitS: 0, why });
      try {
        await this._join();
      } finally {
        this._running = false;
      }
    }, delay * 1000);
  }

  /** Joined (again): the back-off starts over. */
  connected() {
    this.left = false;
    this._attempt = 0;
    this._stop();
  }

  /** The user left (or the server refused us for good): no rejoin. */
  cancel() {
    this.left = true;
    this._stop();
  }

  _stop() {
    clearTimeout(this._timer);
    clearInterval(this._tick);
    this._timer = this._tick = null;
    this._running = false;
    this._changed(null); // also after a try whose join() returned before the session connected
  }
}
