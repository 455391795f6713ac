// The call page's announcements (joins, leaves, mutes, reconnecting, finished captions) go through the page's ONE
// polite live region (page.js `announce`, #announcer), once each: what is said within BATCH_MS is read as one
// message, a repeat inside the batch is dropped, and an identical message after it is still read (the region is
// emptied first, so a screen reader hears the change).

export const BATCH_MS = 250;
const MAX_CHARS = 500;

export class Announcer {
  /** `announce(text)`: the page's live region writer (ctx.announce). */
  constructor(announce) {
    this._announce = announce;
    this._queue = [];
    this._timer = null;
    this.last = ""; // what was last handed to the live region (for tests and readouts)
  }

  /** Queue `text` for the next announcement. */
  say(text) {
    const line = String(text || "").trim();
    if (!line || this._queue.includes(line)) return;
    this._queue.push(line);
    if (this._timer === null) this._timer = setTimeout(() => this.flush(), BATCH_MS);
  }

  /** Hand everything queued to the live region now. */
  flush() {
    clearTimeout(this._timer);
    this._timer = null;
    if (!this._queue.length) return;
    const message = this._queue.map((l) => (/[.!?…]$/.test(l) ? l : `${l}.`)).join(" ").slice(0, MAX_CHARS);
    this._queue = [];
    this.last = message;
    this._announce("");
    setTimeout(() => this._announce(message), 50);
  }
}
