// Captions: live speech captions (caption.partial / caption.final) over the local video preview, a transcript,
// and the visual commentary rounds (vision.*). Event shapes: DESIGN.md section 4.

import { toVttWithTranslations } from "../caption-files.js";
import { el, trimChildren } from "../dom.js";

function formatClock(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "";
  const s = Math.max(0, Math.floor(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}


function scrollToEnd(list) {
  if (!list) return;
  list.scrollTop = list.scrollHeight;
}

const MAX_ITEMS = 300;

const trim = (list) => trimChildren(list, MAX_ITEMS);

export function mount({ client, $, announce, download, copyText, toSrt }) {
  const finalEl = $("caption-final");
  const committedEl = $("caption-committed");
  const tentativeEl = $("caption-tentative");
  const transcript = $("transcript");
  const languageEl = $("caption-language");
  const latencyEl = $("caption-latency");
  const commentary = $("commentary");
  const speech = $("speech-indicator");
  const visionState = $("vision-state");
  let finalTimer = null;
  let droppedFrames = 0;

  // ------------------------------------------------------------ captions
  const segmentRow = (segmentId, startMs) => {
    let row = transcript.querySelector(`li[data-segment-id="${CSS.escape(String(segmentId))}"]`);
    if (!row) {
      row = el("li", "segment partial");
      row.dataset.segmentId = String(segmentId);
      row.append(el("span", "segment-time", formatClock(startMs)), el("span", "segment-text"));
      transcript.append(row);
      trim(transcript);
    }
    return row;
  };

  const setOverlayPartial = (committed, tentative) => {
    committedEl.textContent = committed || "";
    tentativeEl.textContent = tentative ? `${committed ? " " : ""}${tentative}` : "";
  };

  client.on("caption.partial", (ev) => {
    const committed = (ev.committed || "").trim();
    const tentative = (ev.tentative || "").trim();
    setOverlayPartial(committed, tentative);
    if (!transcript) return;
    const row = segmentRow(ev.segment_id, ev.audio_start_ms);
    const text = row.querySelector(".segment-text");
    text.replaceChildren(el("span", "committed", committed), el("span", "tentative", tentative ? ` ${tentative}` : ""));
    scrollToEnd(transcript);
  });

  // The session clock (session_ms: ms of our audio the server has received) mapped to this page's clock: the
  // smallest (arrival - session_ms) seen is the offset with the least network delay in it.
  let clockOffset = Infinity;
  client.on("*", (ev) => {
    if (typeof ev.session_ms === "number") clockOffset = Math.min(clockOffset, performance.now() - ev.session_ms);
  });
  // The language readout shows what the captions are in: finals carry the language of their utterance (with
  // auto the session settles on one and keeps it); a partial never changes it.
  client.on("caption.final", (ev) => {
    if (ev.language && languageEl) languageEl.textContent = ev.language;
  });
  const languageChoice = $("caption-language-choice");
  const browserLanguage = () => (navigator.languages && navigator.languages[0]) || navigator.language || null;
  const chosenLanguage = () => (languageChoice && languageChoice.value) || "auto";
  languageChoice?.addEventListener("change", () => {
    if (languageEl) languageEl.textContent = chosenLanguage() === "auto" ? "—" : chosenLanguage();
    if (client.connected) {
      client.send({ type: "session.update", session: { language: chosenLanguage(), language_prior: browserLanguage() } });
    }
  });
  const latencies = [];
  const showLatency = (ev) => {
    if (!latencyEl || !Number.isFinite(clockOffset) || typeof ev.audio_end_ms !== "number") return;
    const ms = performance.now() - (clockOffset + ev.audio_end_ms);
    if (ms < 0 || ms > 30000) return;
    latencies.push(ms);
    if (latencies.length > 50) latencies.shift();
    const sorted = [...latencies].sort((a, b) => a - b);
    latencyEl.textContent = `${Math.round(ms)} ms`;
    latencyEl.title = `median of the last ${sorted.length}: ${Math.round(sorted[Math.floor(sorted.length / 2)])} ms`;
    latencyEl.dataset.ms = ms.toFixed(0);
  };

  client.on("caption.final", (ev) => {
    const text = (ev.text || "").trim();
    if (text) showLatency(ev);
    setOverlayPartial("", "");
    finalEl.textContent = text;
    clearTimeout(finalTimer);
    finalTimer = setTimeout(() => {
      finalEl.textContent = "";
    }, 6000);
    if (!transcript) return;
    const row = segmentRow(ev.segment_id, ev.audio_start_ms);
    row.classList.remove("partial");
    row.classList.add("final");
    row.querySelector(".segment-time").textContent = formatClock(ev.audio_start_ms);
    row.querySelector(".segment-time").title = `${formatClock(ev.audio_start_ms)}–${formatClock(ev.audio_end_ms)}`;
    row.querySelector(".segment-text").textContent = text;
    row.dataset.startMs = String(ev.audio_start_ms ?? 0);
    row.dataset.endMs = String(ev.audio_end_ms ?? 0);
    if (!text) row.remove();
    else announce?.(text); // the page's one live region hears finals only
    scrollToEnd(transcript);
  });

  const setSpeech = (active) => {
    if (!speech) return;
    speech.dataset.active = active ? "true" : "false";
    speech.textContent = active ? "speech" : "silence";
  };
  client.on("input_audio_buffer.speech_started", () => setSpeech(true));
  client.on("input_audio_buffer.speech_stopped", () => setSpeech(false));

  // ------------------------------------------------------------ visual commentary
  const setVision = (text, active) => {
    if (!visionState) return;
    visionState.textContent = text;
    visionState.dataset.active = active ? "true" : "false";
    visionState.title = droppedFrames ? `${droppedFrames} frames dropped` : "";
  };

  const roundItem = (roundId, prompt) => {
    let item = commentary.querySelector(`li[data-round-id="${CSS.escape(String(roundId))}"]`);
    if (!item) {
      item = el("li", "round active");
      item.dataset.roundId = String(roundId);
      const head = el("div", "round-head");
      head.append(el("span", "round-time", ""));
      if (prompt) head.append(el("span", "round-prompt", prompt));
      item.append(head, el("div", "round-text"));
      commentary.append(item);
      trim(commentary);
    }
    return item;
  };

  client.on("vision.round.started", (ev) => {
    if (!commentary) return;
    roundItem(ev.round_id, ev.prompt);
    setVision("describing", true);
    scrollToEnd(commentary);
  });
  client.on("vision.text.delta", (ev) => {
    if (!commentary) return;
    const item = roundItem(ev.round_id);
    const time = item.querySelector(".round-time");
    if (!time.textContent && typeof ev.frame_ts === "number") time.textContent = `${ev.frame_ts.toFixed(1)} s`;
    item.querySelector(".round-text").append(document.createTextNode(ev.delta || ""));
    setVision("describing", true);
    scrollToEnd(commentary);
  });
  client.on("vision.round.ended", (ev) => {
    if (!commentary) return;
    const item = commentary.querySelector(`li[data-round-id="${CSS.escape(String(ev.round_id))}"]`);
    if (item) {
      item.classList.remove("active");
      if (!item.querySelector(".round-text").textContent.trim()) item.remove();
    }
    setVision("watching", false);
  });
  client.on("vision.silence", () => setVision("watching", false));
  client.on("vision.frame.dropped", () => {
    droppedFrames += 1;
    setVision(visionState ? visionState.textContent : "watching", visionState?.dataset.active === "true");
  });

  // ------------------------------------------------------------ prompt + copy
  const form = $("vision-prompt-form");
  const input = $("vision-prompt");
  if (form && input) {
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const text = input.value.trim();
      if (!text) return;
      if (client.send({ type: "vision.prompt", text })) input.value = "";
    });
  }
  $("transcript-copy")?.addEventListener("click", (e) => {
    const lines = [...transcript.querySelectorAll("li.final")].map(
      (li) => `[${li.querySelector(".segment-time").textContent}] ${li.querySelector(".segment-text").textContent}`,
    );
    if (copyText) copyText(lines.join("\n"), e.currentTarget);
    else navigator.clipboard?.writeText(lines.join("\n")).catch(() => {});
  });
  // caption.translation {segment_id, language, text} (DESIGN.md section 4): kept per segment for the VTT
  // download, shown under the caption's row. The captions app sends none today; a server that translates does.
  const translations = new Map(); // segment_id -> {language: text}, bounded like the rows
  client.on("caption.translation", (ev) => {
    const text = (ev.text || "").trim();
    if (!text || !ev.language || ev.segment_id === undefined) return;
    const key = String(ev.segment_id);
    const entry = translations.get(key) || {};
    entry[ev.language] = `${entry[ev.language] || ""} ${text}`.trim();
    translations.set(key, entry);
    while (translations.size > MAX_ITEMS) translations.delete(translations.keys().next().value);
    const row = transcript?.querySelector(`li[data-segment-id="${CSS.escape(key)}"]`);
    if (!row) return;
    let line = row.querySelector(`.segment-translation[lang="${CSS.escape(ev.language)}"]`);
    if (!line) {
      line = el("span", "segment-translation");
      line.lang = ev.language;
      row.append(line);
    }
    line.textContent = `[${ev.language}] ${entry[ev.language]}`;
  });
  // Downloads of the final captions (kept until Clear): WebVTT (with the translations), SRT, plain text
  const cues = () => [...(transcript?.querySelectorAll("li.final") || [])].map((li) => ({
    start_ms: Number(li.dataset.startMs || 0), end_ms: Number(li.dataset.endMs || 0),
    text: li.querySelector(".segment-text").textContent,
    translations: translations.get(li.dataset.segmentId) || {},
  }));
  const stamp = () => new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
  $("transcript-vtt")?.addEventListener("click", () => download?.(`captions-${stamp()}.vtt`,
    toVttWithTranslations(cues()), "text/vtt"));
  $("transcript-srt")?.addEventListener("click", () => download?.(`captions-${stamp()}.srt`, toSrt(cues()), "application/x-subrip"));
  $("transcript-text")?.addEventListener("click", () => download?.(`captions-${stamp()}.txt`,
    `${cues().map((c) => c.text).join("\n")}\n`));
  $("transcript-clear")?.addEventListener("click", () => {
    transcript?.replaceChildren();
    translations.clear();
  });

  client.addEventListener("statechange", (ev) => {
    if (ev.detail.state === "connecting") {
      // the transcript stays until the user clears it (Clear)
      commentary?.replaceChildren();
      setOverlayPartial("", "");
      finalEl.textContent = "";
      droppedFrames = 0;
      setSpeech(false);
      setVision("idle", false);
    }
  });
  return {
    // the session ended: no partial stays on the video, no badge stays on; an unfinished row is greyed out
    reset() {
      setOverlayPartial("", "");
      setSpeech(false);
      setVision("idle", false);
      for (const row of transcript?.querySelectorAll("li.partial") || []) row.classList.add("stale");
      for (const item of commentary?.querySelectorAll("li.active") || []) item.classList.remove("active");
    },
    // auto (the default) with the browser's language as the prior, or the language picked
    configure(config) {
      return { ...config, language: chosenLanguage(), language_prior: browserLanguage() };
    },
  };
}
