// Audio level meters computed with WebAudio AnalyserNodes.
//
// A meter element gets `data-level` (current RMS, 0..1), `data-peak` (peak RMS since the last reset) and
// the CSS custom properties --level / --peak (0..1, scaled for display) that app.css draws as a bar.
// Note: Chrome feeds a remote WebRTC stream into WebAudio only when that stream also plays in a media
// element; the page attaches it to <audio id="remote-audio"> for that reason.

let sharedContext = null;

/** The page's AudioContext, created lazily (ideally inside a user gesture) and resumed when suspended. */
export function audioContext() {
  if (!sharedContext) {
    const Ctx = window.AudioContext || window.webkitAudioContext;
    if (!Ctx) return null;
    sharedContext = new Ctx({ latencyHint: "interactive" });
  }
  if (sharedContext.state === "suspended") sharedContext.resume().catch(() => {});
  return sharedContext;
}

/** Map RMS to a 0..1 bar length on a dB scale (-60 dBFS .. 0 dBFS). */
export function displayLevel(rms) {
  if (!rms || rms <= 0) return 0;
  const db = 20 * Math.log10(rms);
  return Math.max(0, Math.min(1, (db + 60) / 60));
}

export class LevelMeter {
  /**
   * @param {HTMLElement|null} element   the meter element (gets data-level / data-peak)
   * @param {object} [opts]
   * @param {number} [opts.intervalMs]  sampling period; a timer, not rAF, so it keeps running in background tabs
   */
  constructor(element, { intervalMs = 50 } = {}) {
    this.element = element;
    this.intervalMs = intervalMs;
    this.level = 0;
    this.peak = 0;
    this.lastAboveAt = null; // performance.now() of the last sample above `activeThreshold`
    this.activeThreshold = 0.02;
    this._listeners = new Set();
    this._source = null;
    this._analyser = null;
    this._sink = null;
    this._timer = null;
    this._buffer = null;
    this._stream = null;
    this._render();
  }

  /** Listen to samples: fn(level, nowMs). Returns an unsubscribe function. */
  onSample(fn) {
    this._listeners.add(fn);
    return () => this._listeners.delete(fn);
  }

  /** Measure this MediaStream (replaces the previous one). Keeps the peak; call reset() to clear it. */
  attach(stream) {
    this.detach();
    if (!stream || !stream.getAudioTracks().length) return;
    const ctx = audioContext();
    if (!ctx) return;
    this._stream = stream;
    this._source = ctx.createMediaStreamSource(stream);
    this._analyser = ctx.createAnalyser();
    this._analyser.fftSize = 2048;
    this._analyser.smoothingTimeConstant = 0;
    // A muted sink keeps the graph pulled in every browser without making the meter audible.
    this._sink = ctx.createGain();
    this._sink.gain.value = 0;
    this._source.connect(this._analyser);
    this._analyser.connect(this._sink);
    this._sink.connect(ctx.destination);
    this._buffer = new Float32Array(this._analyser.fftSize);
    this._timer = setInterval(() => this._sample(), this.intervalMs);
  }

  detach() {
    clearInterval(this._timer);
    this._timer = null;
    for (const node of [this._source, this._analyser, this._sink]) {
      try {
        if (node) node.disconnect();
      } catch {
        /* already disconnected */
      }
    }
    this._source = this._analyser = this._sink = null;
    this._stream = null;
    this.level = 0;
    this._render();
  }

  reset() {
    this.peak = 0;
    this.level = 0;
    this.lastAboveAt = null;
    this._render();
  }

  _sample() {
    if (!this._analyser) return;
    if (sharedContext && sharedContext.state === "suspended") sharedContext.resume().catch(() => {});
    this._analyser.getFloatTimeDomainData(this._buffer);
    let sum = 0;
    for (let i = 0; i < this._buffer.length; i += 1) sum += this._buffer[i] * this._buffer[i];
    const rms = Math.sqrt(sum / this._buffer.length);
    const now = performance.now();
    this.level = rms;
    if (rms > this.peak) this.peak = rms;
    if (rms >= this.activeThreshold) this.lastAboveAt = now;
    this._render();
    for (const fn of this._listeners) {
      try {
        fn(rms, now);
      } catch (err) {
        console.error("meter listener failed", err);
      }
    }
  }

  _render() {
    const el = this.element;
    if (!el) return;
    el.dataset.level = this.level.toFixed(4);
    el.dataset.peak = this.peak.toFixed(4);
    el.style.setProperty("--level", displayLevel(this.level).toFixed(3));
    el.style.setProperty("--peak", displayLevel(this.peak).toFixed(3));
    el.setAttribute("aria-valuenow", String(Math.round(displayLevel(this.level) * 100)));
    const db = this.level > 0 ? 20 * Math.log10(this.level) : -Infinity;
    el.title = Number.isFinite(db) ? `${db.toFixed(1)} dBFS (peak ${(20 * Math.log10(this.peak || 1e-9)).toFixed(1)})` : "silent";
  }
}
