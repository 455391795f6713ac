// Speaking indicators of the call tiles: a WebAudio level per stream, and data-speaking on its tile while it is
// loud (within the last 400 ms).

import { audioContext } from "../meters.js";

const SPEAKING_RMS = 0.015;
const HOLD_MS = 400;
const POLL_MS = 120;

export class SpeakingIndicators {
  /** `tileOf(id)`: the tile element of `id` (or null). */
  constructor(tileOf) {
    this._tileOf = tileOf;
    this._levels = new Map(); // id -> {source, analyser, buffer, lastLoud}
    setInterval(() => this._poll(), POLL_MS);
  }

  /** Watch `stream`'s audio for `id` (null stops watching, and its tile stops showing it speaking). */
  watch(id, stream) {
    const old = this._levels.get(id);
    if (old) {
      old.source.disconnect();
      this._levels.delete(id);
    }
    const tile = this._tileOf(id);
    if (tile) tile.dataset.speaking = "false";
    const ctx = stream && stream.getAudioTracks().length ? audioContext() : null;
    if (!ctx) return;
    const source = ctx.createMediaStreamSource(stream);
    const analyser = ctx.createAnalyser();
    analyser.fftSize = 1024;
    source.connect(analyser);
    this._levels.set(id, { source, analyser, buffer: new Float32Array(analyser.fftSize), lastLoud: 0 });
  }

  _poll() {
    const now = performance.now();
    for (const [id, meter] of this._levels) {
      meter.analyser.getFloatTimeDomainData(meter.buffer);
      let sum = 0;
      for (const v of meter.buffer) sum += v * v;
      if (Math.sqrt(sum / meter.buffer.length) > SPEAKING_RMS) meter.lastLoud = now;
      const tile = this._tileOf(id);
      if (tile) tile.dataset.speaking = now - meter.lastLoud < HOLD_MS ? "true" : "false";
    }
  }
}
