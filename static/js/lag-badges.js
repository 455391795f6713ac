// Lag where it matters: a call speaker's tile says "3.4 s behind" while its captions arrive late (a caption shown
// more than CAPTION_LAG_MS after the speech it covers: the caption events' behind_ms) or its interpretation is
// behind by more than SPEECH_LAG_MS (spoken: translation.speech.catchup lag_ms; as text: caption.translation
// lag_ms). The worst of the three shows. It clears when a later event catches up, and by itself after LAG_STALE_MS
// without news (a figure about a moment long gone is stale). Replayed events (a late joiner's transcript) say
// nothing about lag now.

export const CAPTION_LAG_MS = 2000;
export const SPEECH_LAG_MS = 3000;
export const LAG_STALE_MS = 10_000;

/** "3.4 s behind". */
export function behindText(ms) {
  return `${(ms / 1000).toFixed(1)} s behind`;
}

export class LagBadges {
  /** `render(id, lag)`: lag is null (nothing to show) or {ms, what: "captions"|"interpretation"}. */
  constructor(render) {
    this._render = render;
    this._lags = new Map(); // id -> {captions, interpretation, translation: ms|null, timer}
  }

  _update(id, what, ms) {
    if (!id) return;
    const entry = this._lags.get(id) || { captions: null, interpretation: null, translation: null, timer: null };
    entry[what] = ms;
    clearTimeout(entry.timer);
    entry.timer = null;
    const kinds = ["interpretation", "translation", "captions"].filter((k) => entry[k] !== null);
    if (!kinds.length) {
      if (this._lags.delete(id)) this._render(id, null);
      return;
    }
    entry.timer = setTimeout(() => this.forget(id), LAG_STALE_MS);
    this._lags.set(id, entry);
    const worst = kinds.reduce((a, b) => (entry[b] > entry[a] ? b : a));
    this._render(id, { ms: entry[worst], what: worst === "captions" ? "captions" : "interpretation" });
  }

  /** A caption.partial / caption.final of speaker `id` (its behind_ms, when the server sends it). */
  caption(id, ev) {
    if (ev.replayed || typeof ev.behind_ms !== "number") return;
    this._update(id, "captions", ev.behind_ms > CAPTION_LAG_MS ? ev.behind_ms : null);
  }

  /** A translation.speech.catchup of speaker `id`'s interpretation. */
  speech(id, ev) {
    const lag = Number(ev.lag_ms);
    const behind = ev.action !== "normal" && Number.isFinite(lag) && lag > SPEECH_LAG_MS;
    this._update(id, "interpretation", behind ? lag : null);
  }

  /** A caption.translation of speaker `id` (its lag_ms, when the server sends it). */
  translation(id, ev) {
    const lag = Number(ev.lag_ms);
    if (ev.replayed || ev.lag_ms === null || ev.lag_ms === undefined || !Number.isFinite(lag)) return;
    this._update(id, "translation", lag > SPEECH_LAG_MS ? lag : null);
  }

  /** Clear `id`'s badge (it left, or the session ended). */
  forget(id) {
    const entry = this._lags.get(id);
    if (!entry) return;
    clearTimeout(entry.timer);
    this._lags.delete(id);
    this._render(id, null);
  }

  clear() {
    for (const id of [...this._lags.keys()]) this.forget(id);
  }
}
