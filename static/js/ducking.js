// Ducking: a call speaker's own voice goes down only while its interpretation plays on this page, as in an
// interpreter's booth, and never merely because interpretation is on.
//
// The server frames each spoken interpretation with translation.speech.started {speaker, utterance_id,
// segment_id, starts_in_ms} and translation.speech.done {speaker, utterance_id, segment_id}. A speaker is ducked
// from started (plus its starts_in_ms: speech queued ahead of it plays first) until the last of its open
// utterances is done, plus a short release so the voice does not pump between clauses. If done never comes
// (a lost event, a session that ended) a safety timeout brings the voice back.

export const DUCK_RELEASE_MS = 300;
export const DUCK_SAFETY_MS = 20_000;

/** The participant id an event's `speaker` names (the room events' {participant_id, name}, or a bare id). */
export function speakerId(ev) {
  const s = ev && ev.speaker;
  if (!s) return null;
  return typeof s === "string" ? s : s.participant_id || null;
}

function utteranceKey(ev) {
  return String(ev.utterance_id ?? ev.segment_id ?? "");
}

export class Ducking {
  /**
   * `apply(id, ducked)` is called whenever a speaker's ducked state changes. `enabled()` says whether this page
   * plays interpretation at all (when false nothing is ducked).
   */
  constructor({ apply, enabled = () => true, releaseMs = DUCK_RELEASE_MS, safetyMs = DUCK_SAFETY_MS }) {
    this._apply = apply;
    this._enabled = enabled;
    this.releaseMs = releaseMs;
    this.safetyMs = safetyMs;
    this._speakers = new Map(); // id -> {open: Map(key -> start timer|null), ducked, release, safety}
  }

  _state(id) {
    let s = this._speakers.get(id);
    if (!s) {
      s = { open: new Map(), ducked: false, release: null, safety: null };
      this._speakers.set(id, s);
    }
    return s;
  }

  _set(id, s, ducked) {
    const want = ducked && this._enabled();
    if (s.ducked === want) return;
    s.ducked = want;
    this._apply(id, want);
  }

  /** A translation.speech.started event. */
  started(ev) {
    const id = speakerId(ev);
    if (!id) return;
    const s = this._state(id);
    const key = utteranceKey(ev);
    clearTimeout(s.release);
    s.release = null;
    clearTimeout(s.open.get(key));
    const delay = Math.max(0, Math.min(Number(ev.starts_in_ms) || 0, this.safetyMs));
    if (delay > 0) {
      s.open.set(key, setTimeout(() => {
        s.open.set(key, null);
        this._set(id, s, true);
      }, delay));
    } else {
      s.open.set(key, null);
      this._set(id, s, true);
    }
    clearTimeout(s.safety);
    s.safety = setTimeout(() => this.forget(id), delay + this.safetyMs);
  }

  /** A translation.speech.done event: released after `releaseMs` once none of the speaker's speech is open. */
  done(ev) {
    const id = speakerId(ev);
    const s = id && this._speakers.get(id);
    if (!s) return;
    const key = utteranceKey(ev);
    clearTimeout(s.open.get(key));
    s.open.delete(key);
    if (s.open.size) return;
    clearTimeout(s.release);
    s.release = setTimeout(() => {
      s.release = null;
      if (!s.open.size) this.forget(id);
    }, this.releaseMs);
  }

  /** Whether `id` is ducked now. */
  isDucked(id) {
    return Boolean(this._speakers.get(id)?.ducked);
  }

  /** Stop ducking `id` now and forget its open speech (it left, changed language, or done never came). */
  forget(id) {
    const s = this._speakers.get(id);
    if (!s) return;
    for (const timer of s.open.values()) clearTimeout(timer);
    clearTimeout(s.release);
    clearTimeout(s.safety);
    this._speakers.delete(id);
    if (s.ducked) this._apply(id, false);
  }

  /** Stop ducking everyone (interpretation turned off, another listen language, the session ended). */
  clear() {
    for (const id of [...this._speakers.keys()]) this.forget(id);
  }
}
