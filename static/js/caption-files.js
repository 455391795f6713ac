// Caption files with translations, built in the page: WebVTT whose cues carry each translation as an extra line
// "[xx] text" after the source text (the format of GET /v1/rooms/{room}/transcript.vtt,
// rtc_agent/apps/call/transcript_vtt.py: plain lines are what every player shows).
//
// A cue is {start_ms, end_ms, text, translations?: {code: text}}. Text is escaped (&, <, >) and kept on one line,
// so speech such as "-->" or "<b>" cannot end a cue or open a span; cues are written in start order (WebVTT needs
// non-decreasing start times) and last at least 1 ms.

/** Milliseconds as a WebVTT timestamp hh:mm:ss.mmm (negative times are 0). */
export function timestamp(ms) {
  const t = Math.max(0, Math.round(ms || 0));
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(Math.floor(t / 3600000))}:${pad(Math.floor((t % 3600000) / 60000))}:${pad(Math.floor((t % 60000) / 1000))}`
    + `.${pad(t % 1000, 3)}`;
}

/** One line of cue text: WebVTT-escaped, whitespace collapsed. */
export function cueText(text) {
  return String(text ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").split(/\s+/)
    .filter(Boolean).join(" ");
}

/** Cues (with optional translations) as WebVTT: the source line, then one "[xx] text" line per language. */
export function toVttWithTranslations(cues) {
  const ordered = cues.filter((c) => cueText(c.text)).map((c, i) => ({ c, i }))
    .sort((a, b) => (a.c.start_ms - b.c.start_ms) || (a.i - b.i)).map(({ c }) => c);
  const body = ordered.map((c) => {
    const lines = [`${timestamp(c.start_ms)} --> ${timestamp(Math.max(c.end_ms, c.start_ms + 1))}`, cueText(c.text)];
    for (const code of Object.keys(c.translations || {}).sort()) {
      const text = cueText(c.translations[code]);
      if (text) lines.push(`[${cueText(code)}] ${text}`);
    }
    return lines.join("\n");
  });
  return `WEBVTT\n\n${body.join("\n\n")}\n`;
}

const overlap = (a, b) => Math.min(a.end_ms, b.end_ms) - Math.max(a.start_ms, b.start_ms);

/**
 * The source cues with the target cues' texts attached as translations: each target cue [{start_ms, end_ms,
 * text, language}] goes to the source cue it overlaps most in time, else to the last source cue that started
 * before it (the first one when none did); several texts in one language are joined with spaces. The inputs are
 * not changed.
 */
export function attachTranslations(sourceCues, targetCues) {
  const out = sourceCues.map((c) => ({ ...c, translations: { ...(c.translations || {}) } }));
  if (!out.length) return out;
  for (const t of targetCues) {
    if (!t.language || !cueText(t.text)) continue;
    let best = -1;
    let bestOverlap = 0;
    let before = 0;
    out.forEach((s, i) => {
      const o = overlap(s, t);
      if (o > bestOverlap) {
        best = i;
        bestOverlap = o;
      }
      if (s.start_ms <= t.start_ms) before = i;
    });
    const cue = out[best >= 0 ? best : before];
    const joined = `${cue.translations[t.language] || ""} ${t.text}`.trim();
    cue.translations[t.language] = joined;
  }
  return out;
}
