// Rejoining a call by itself when the server goes away for a moment (a restart, a lost heartbeat, a network
// fault): backing off 1, 2, 4, 8, 15, then every 30 s, until the user leaves. A refusal is final.

const DELAYS_S = [1, 2, 4, 8, 15, 30];

/** The session.ended reasons worth rejoining after. */
export const RECONNECT_REASONS = new Set(["server_shutdown", "heartbeat_lost", "internal_error", "ice_failed", "peer_closed"]);

export class Reconnector {
  /** `join()` rejoins; `changed()` redraws the controls; `badge` shows the countdown; `log` notes it. */
  constructor({ join, changed, badge, log }) {
    this._join = join;
    this._changed = changed;
    this._badge = badge;
    this._log = log;
    this.left = true; // the user left (or never joined): nothing to rejoin
    this._attempt = 0;
    this._timer = null;
  }

  /** Whether a rejoin is scheduled. */
  get pending() {
    return this._timer !== null;
  }

  /** Rejoin after the next delay, saying `why` (nothing when the user left or one is already scheduled). */
  schedule(why) {
    if (this.left || this._timer !== null) return;
    const delay = DELAYS_S[Math.min(this._attempt, DELAYS_S.length - 1)];
    this._attempt += 1;
    this._badge.hidden = false;
    this._badge.textContent = `reconnecting in ${delay} s`;
    this._log.note(`${why}: reconnecting in ${delay} s`, "warn");
    this._timer = setTimeout(async () => {
      this._timer = null;
      this._badge.textContent = "reconnecting…";
      await this._join();
    }, delay * 1000);
    this._changed();
  }

  /** Joined (again): the back-off starts over. */
  connected() {
    this.left = false;
    this._attempt = 0;
    this._badge.hidden = true;
  }

  /** The user left: no rejoin. */
  cancel() {
    this.left = true;
    clearTimeout(this._timer);
    this._timer = null;
    this._badge.hidden = true;
  }
}
