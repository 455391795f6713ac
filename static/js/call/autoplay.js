// The call's sound when the browser blocks autoplay (a reload that rejoins by itself has no click behind it):
// the first refused play() asks for one click, and that click starts every tile's media and the page's remote
// audio, then the note goes.

const NOTE = "The browser holds back the call's sound until you click or press a key on the page.";

export class AutoplayGate {
  /** `errors`: the page's banner; `media()`: every <video>/<audio> that should be playing now. */
  constructor({ errors, media }) {
    this._errors = errors;
    this._media = media;
    this.blocked = false;
    this._resume = () => this.resume();
  }

  /** Play `el`; a refusal by the autoplay policy asks for the click (once). */
  play(el, log) {
    el.play().catch((err) => {
      if (err && err.name === "NotAllowedError") this._block();
      else log.note(`remote media did not play: ${err.message}`, "warn");
    });
  }

  _block() {
    if (this.blocked) return;
    this.blocked = true;
    this._errors.show(NOTE, { code: "autoplay_blocked" });
    document.addEventListener("pointerdown", this._resume, { once: true, capture: true });
    document.addEventListener("keydown", this._resume, { once: true, capture: true });
  }

  /** The click came: everything plays, the note goes. */
  resume() {
    if (!this.blocked) return;
    this.blocked = false;
    document.removeEventListener("pointerdown", this._resume, { capture: true });
    document.removeEventListener("keydown", this._resume, { capture: true });
    for (const el of this._media()) if (el.srcObject && el.paused) el.play().catch(() => {});
    if (document.getElementById("error")?.dataset.code === "autoplay_blocked") this._errors.clear();
  }
}
