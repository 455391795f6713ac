// Receive numbers of an SFU room's media (call/sfu.js) from its subscriber connection's getStats, per speaker and
// for the interpreter feed: what the call page's tiles and tests read. Each inbound-rtp report names its `mid`;
// the subscription's stream list (Janus's "streams": mid -> feed) says whose it is.

/** The listen language of an interpreter feed's display name ("interpreter-es" -> "es"), or null. */
export function interpreterLanguage(display) {
  const text = String(display || "");
  return text.startsWith("interpreter-") ? text.slice("interpreter-".length) : null;
}

function displayOf(media, mid) {
  const s = media.subStreams.get(String(mid));
  if (!s || s.active === false) return null;
  return s.feed_display || media.feeds.get(s.feed_id)?.display || null;
}

/** {speaker id: {state, framesDecoded, audioEnergy, audioBytes}} for every speaker received on `media`. */
export async function speakerStats(media) {
  const out = {};
  const pc = media.subPc;
  if (!pc) return out;
  const report = await pc.getStats();
  report.forEach((r) => {
    if (r.type !== "inbound-rtp") return;
    const display = displayOf(media, r.mid);
    if (!display || interpreterLanguage(display) !== null) return;
    const entry = out[display] || (out[display] = { state: pc.connectionState, framesDecoded: 0, audioEnergy: 0, audioBytes: 0 });
    if (r.kind === "video") entry.framesDecoded += r.framesDecoded || 0;
    if (r.kind === "audio") {
      entry.audioEnergy += r.totalAudioEnergy || 0;
      entry.audioBytes += r.bytesReceived || 0;
    }
  });
  return out;
}

/** {language, audioBytes, audioEnergy, published} of the interpreter feed received on `media` (zeros: none;
 * published: my own publishing connection's state, "none" when I publish nothing). */
export async function interpretationStats(media) {
  const out = { language: null, audioBytes: 0, audioEnergy: 0, published: media.pubPc ? media.pubPc.connectionState : "none" };
  if (!media.subPc) return out;
  const report = await media.subPc.getStats();
  report.forEach((r) => {
    if (r.type !== "inbound-rtp" || r.kind !== "audio") return;
    const language = interpreterLanguage(displayOf(media, r.mid));
    if (language === null) return;
    out.language = language;
    out.audioBytes += r.bytesReceived || 0;
    out.audioEnergy += r.totalAudioEnergy || 0;
  });
  return out;
}
