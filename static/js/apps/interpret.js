// Interpret: simultaneous interpretation (SimulInfer policy). One translation.chunk per processed audio chunk
// (EMIT / WAIT / SKIP), translation.flush when the backlog is re-translated, translation.reset on context cuts.
// Event shapes: DESIGN.md section 4. The Source pane shows the source speech either from caption.partial /
// caption.final (the embedded Whisper engine: the server runs the captions pipeline on the source) or from
// translation.chunk.source_text (cascade / openai engines); one session uses one of the two, never both.

import { attachTranslations, toVttWithTranslations } from "../caption-files.js";
import { el, stickToEnd, trimChildren } from "../dom.js";
import { SPEECH_LAG_MS, behindText } from "../lag-badges.js";
import { offerListenLanguages, renderOfferNote, trackEffectiveConfig } from "../listen-languages.js";

const MAX_CELLS = 400;
const MAX_SPANS = 600;

/** Keep only the <option>s of `select` whose value is in `allowed` (and "auto"); returns the removed values. */
export function limitOptions(select, allowed) {
  if (!select || !Array.isArray(allowed) || !allowed.length) return [];
  const removed = [];
  for (const option of [...select.options]) {
    if (option.value !== "auto" && !allowed.includes(option.value)) {
      removed.push(option.value);
      option.remove();
    }
  }
  if (![...select.options].some((o) => o.selected)) select.selectedIndex = 0;
  return removed;
}

export function mount({ client, config, $, download, copyText, toVtt, announce }) {
  const sourceSel = $("source-language");
  const targetSel = $("target-language");
  const speak = $("speak-translation");
  const sourceText = $("source-text");
  const targetText = $("target-text");
  const timeline = $("timeline");
  const lagEl = $("lag");
  const stats = $("timeline-stats");
  const remoteAudio = $("remote-audio");

  // Offer only what this server can do (client_config.capabilities; listen-languages.js for the targets: text
  // only ones marked, the rest disabled with the reason); the "Server setup" note says the rest.
  const caps = (config && config.capabilities) || {};
  const offers = offerListenLanguages(targetSel, caps);
  limitOptions(sourceSel, caps.st?.sources || caps.asr?.languages);
  let speakWanted = speak ? speak.checked : true;
  const targetOffer = () => (offers && targetSel ? offers.byCode[targetSel.value] || null : null);
  // A target without a voice: the translation is text only, whatever the box said.
  const speakNow = () => speakWanted && targetOffer()?.speech !== false;
  const renderTargetChoice = () => {
    renderOfferNote($("target-quality"), targetOffer());
    if (!speak) return;
    speak.disabled = targetOffer()?.speech === false;
    speak.checked = speakNow();
    if (remoteAudio) remoteAudio.muted = !speak.checked;
  };
  const speechBehind = $("speech-behind");
  const embeddedSt = caps.engines?.st?.kind === "embedded";
  const detectedEl = $("detected-language");

  // Kept for the downloads: [{start_ms, end_ms, text}] per pane (the source: its final captions, or chunk texts;
  // each translation also keeps its language).
  let sourceCues = [];
  let sourceMode = null; // "captions" or "chunks": what fills the Source pane in this session
  let partialRow = null; // the source caption being recognized (tentative, greyed)
  let targetCues = [];
  let lastEmitEnd = null;
  let line = null; // the current translation line (a new one after a pause or a flush)
  const PAUSE_MS = 1200;
  const fmt = (ms) => {
    const t = Math.max(0, Math.round((ms || 0) / 1000));
    return `${Math.floor(t / 60)}:${String(t % 60).padStart(2, "0")}`;
  };
  const setLangs = () => {
    if (targetText && targetSel?.value) targetText.lang = targetSel.value;
    if (sourceText) {
      if (sourceSel?.value && sourceSel.value !== "auto") sourceText.lang = sourceSel.value;
      else sourceText.removeAttribute("lang");
    }
  };
  setLangs();
  const newLine = (startMs) => {
    if (!targetText) return null;
    const row = el("div", "tline");
    const time = el("time", "tline-time", fmt(startMs));
    time.dataset.ms = String(Math.round(startMs || 0));
    row.append(time, " ");
    targetText.append(row);
    trimChildren(targetText, MAX_SPANS);
    return row;
  };
  const appendTarget = (text, startMs, endMs, cls, title) => {
    if (!targetText) return;
    if (!line || !line.isConnected || (lastEmitEnd !== null && startMs - lastEmitEnd > PAUSE_MS)) line = newLine(startMs);
    stickToEnd(targetText, () => {
      const span = el("span", cls, `${text} `);
      span.title = title;
      line.append(span);
    });
    lastEmitEnd = endMs;
    targetCues.push({ start_ms: startMs, end_ms: endMs, text, language: targetSel?.value || null });
    announce?.(text);
  };
  const showDetected = (ev) => {
    const lang = ev.language || ev.source_language || ev.detected_language;
    if (!lang) return;
    if (sourceMode === "captions" && ev.type === "translation.chunk") return; // the captions' rule decides it
    if (detectedEl) {
      detectedEl.textContent = `detected: ${lang}`;
      detectedEl.dataset.language = lang;
      detectedEl.hidden = false;
    }
    if (sourceText && (!sourceSel || sourceSel.value === "auto")) sourceText.lang = lang;
  };

  // Downloads and copy (kept until the user clears them)
  const stamp = () => new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
  const asText = (cues) => `${cues.map((c) => c.text).join(" ").replace(/\s+/g, " ").trim()}\n`;
  const vtt = (cues) => (toVtt ? toVtt(cues) : "");
  $("interpret-download-target-text")?.addEventListener("click", () => download?.(`translation-${stamp()}.txt`, asText(targetCues)));
  $("interpret-download-target-vtt")?.addEventListener("click", () => download?.(`translation-${stamp()}.vtt`, vtt(targetCues), "text/vtt"));
  $("interpret-download-source-text")?.addEventListener("click", () => download?.(`source-${stamp()}.txt`, asText(sourceCues)));
  // the source cues with their translations as extra cue lines ("[en] ..."), as the room transcripts have them
  $("interpret-download-source-vtt")?.addEventListener("click", () => download?.(`source-${stamp()}.vtt`,
    toVttWithTranslations(attachTranslations(sourceCues, targetCues)), "text/vtt"));
  $("interpret-copy")?.addEventListener("click", (e) => copyText?.(asText(targetCues), e.currentTarget));
  $("interpret-clear")?.addEventListener("click", () => {
    sourceText?.replaceChildren();
    partialRow = null;
    targetText?.replaceChildren();
    sourceCues = [];
    targetCues = [];
    line = null;
    lastEmitEnd = null;
  });

  const counts = { EMIT: 0, WAIT: 0, SKIP: 0, flush: 0, reset: 0 };
  let lags = [];
  let latencies = [];

  // With auto the server expects the browser's language (language_prior), as the captions page does.
  const browserLanguage = () => (navigator.languages && navigator.languages[0]) || navigator.language || null;
  const languages = ({ update = false } = {}) => {
    const out = {};
    const source = sourceSel?.value || "auto";
    if (source !== "auto" || update) out.source_language = source;
    if (source === "auto" && browserLanguage()) out.language_prior = browserLanguage();
    if (targetSel && targetSel.value) out.target_language = targetSel.value;
    return out;
  };

  const send = (session) => {
    if (client.connected) client.send({ type: "session.update", session });
  };
  const onLanguageChange = () => {
    setLangs();
    const spoke = speak ? speak.checked : true;
    renderTargetChoice();
    send({ ...languages({ update: true }), ...(speak && speak.checked !== spoke ? { speak: speak.checked } : {}) });
  };
  sourceSel?.addEventListener("change", onLanguageChange);
  targetSel?.addEventListener("change", onLanguageChange);
  speak?.addEventListener("change", () => {
    speakWanted = speak.checked;
    renderTargetChoice();
    send({ speak: speak.checked });
  });
  renderTargetChoice();
  // A change the server cannot serve (unsupported_language; page.js shows its message) keeps the config as it
  // was: the selects go back to the languages in effect.
  trackEffectiveConfig(client, [[targetSel, "target_language"], [sourceSel, "source_language"]], (effective) => {
    if (typeof effective.speak === "boolean" && targetOffer()?.speech !== false) speakWanted = effective.speak;
    setLangs();
    renderTargetChoice();
  });

  const renderStats = () => {
    if (stats) {
      stats.textContent = `${counts.EMIT} emit · ${counts.WAIT} wait · ${counts.SKIP} skip · ${counts.flush} flush · ${counts.reset} reset`;
    }
  };

  const renderLag = (lag, latency) => {
    if (!lagEl) return;
    const avg = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
    const parts = [];
    if (lag !== null) parts.push(`lag ${(lag / 1000).toFixed(2)} s`);
    const avgLag = avg(lags);
    if (avgLag !== null) parts.push(`avg ${(avgLag / 1000).toFixed(2)} s`);
    if (latency !== null) parts.push(`model ${Math.round(latency)} ms`);
    lagEl.textContent = parts.length ? parts.join(" · ") : "lag —";
    if (lag !== null) lagEl.dataset.lagMs = String(Math.round(lag));
    if (avgLag !== null) lagEl.dataset.avgLagMs = String(Math.round(avgLag));
    if (latency !== null) lagEl.dataset.latencyMs = String(Math.round(latency));
  };

  const addCell = (kind, title, durationMs = 800) => {
    if (!timeline) return;
    stickToEnd(timeline, () => {
      const cell = el("span", `cell ${kind.toLowerCase()}`);
      cell.style.setProperty("--w", String(Math.max(0.25, Math.min(4, durationMs / 800))));
      cell.title = title;
      timeline.append(cell);
      trimChildren(timeline, MAX_CELLS);
    });
  };

  // Source captions (embedded engine): one line per final caption, with its time and language; the caption being
  // recognized is shown greyed (committed words, then the tentative ones) until its final replaces it.
  const captionRow = (ev) => {
    if (!partialRow || !partialRow.isConnected || partialRow.dataset.segmentId !== String(ev.segment_id)) {
      partialRow = el("div", "tline sline partial");
      partialRow.dataset.segmentId = String(ev.segment_id ?? "");
      const time = el("time", "tline-time", fmt(ev.audio_start_ms));
      time.dataset.ms = String(Math.round(ev.audio_start_ms || 0));
      partialRow.append(time, " ", el("span", "src-text"));
      stickToEnd(sourceText, () => {
        sourceText.append(partialRow);
        trimChildren(sourceText, MAX_SPANS);
      });
    }
    if (ev.language) partialRow.lang = ev.language;
    return partialRow;
  };
  const useCaptions = () => {
    if (sourceMode === "chunks") return false;
    sourceMode = "captions";
    return Boolean(sourceText);
  };
  client.on("caption.partial", (ev) => {
    if (!useCaptions()) return;
    const row = captionRow(ev);
    const committed = (ev.committed || "").trim();
    const tentative = (ev.tentative || "").trim();
    stickToEnd(sourceText, () => {
      row.querySelector(".src-text").replaceChildren(
        el("span", "committed", committed), el("span", "tentative", tentative ? ` ${tentative}` : ""));
    });
  });
  client.on("caption.final", (ev) => {
    if (!useCaptions()) return;
    const text = (ev.text || "").trim();
    showDetected(ev);
    const row = captionRow(ev);
    partialRow = null;
    if (!text) {
      row.remove();
      return;
    }
    row.classList.remove("partial");
    row.classList.add("final");
    row.querySelector(".src-text").textContent = text;
    const time = row.querySelector(".tline-time");
    time.textContent = fmt(ev.audio_start_ms);
    time.title = `${fmt(ev.audio_start_ms)}–${fmt(ev.audio_end_ms)}`;
    sourceCues.push({ start_ms: ev.audio_start_ms ?? 0, end_ms: ev.audio_end_ms ?? 0, text });
  });

  // WAIT chunks leave their source text "pending" until the next EMIT or flush commits a translation.
  const commitPending = () => {
    for (const span of sourceText?.querySelectorAll(".pending") || []) span.classList.remove("pending");
  };

  client.on("translation.chunk", (ev) => {
    const action = String(ev.action || "").toUpperCase();
    if (action in counts) counts[action] += 1;
    const dur = (ev.audio_end_ms ?? 0) - (ev.audio_start_ms ?? 0);
    const details = [
      `#${ev.index ?? "?"} ${action}`,
      `${((ev.audio_start_ms ?? 0) / 1000).toFixed(1)}–${((ev.audio_end_ms ?? 0) / 1000).toFixed(1)} s`,
      ev.latency_ms !== undefined ? `${Math.round(ev.latency_ms)} ms` : "",
      ev.text ? `“${ev.text}”` : "",
      ev.stop_reason ? `stop: ${ev.stop_reason}` : "",
    ].filter(Boolean).join(" · ");
    addCell(action || "wait", details, dur > 0 ? dur : 800);
    showDetected(ev);

    if (ev.source_text && sourceMode !== "captions") {
      sourceMode = "chunks";
      sourceCues.push({ start_ms: ev.audio_start_ms ?? 0, end_ms: ev.audio_end_ms ?? 0, text: ev.source_text });
    }
    if (ev.source_text && sourceText && sourceMode === "chunks") {
      stickToEnd(sourceText, () => {
        const span = el("span", action === "WAIT" ? "src pending" : "src", `${ev.source_text} `);
        span.title = details;
        sourceText.append(span);
        trimChildren(sourceText, MAX_SPANS);
      });
    }
    if (action === "EMIT" && ev.text) {
      commitPending();
      appendTarget(ev.text, ev.audio_start_ms ?? 0, ev.audio_end_ms ?? 0, "tgt", details);
    }
    let lag = null;
    if (action === "EMIT" && typeof ev.session_ms === "number" && typeof ev.audio_end_ms === "number") {
      lag = Math.max(0, ev.session_ms - ev.audio_end_ms);
      lags.push(lag);
      if (lags.length > 50) lags = lags.slice(-50);
    }
    let latency = null;
    if (typeof ev.latency_ms === "number" && action !== "SKIP") {
      latency = ev.latency_ms;
      latencies.push(latency);
      if (latencies.length > 50) latencies = latencies.slice(-50);
    }
    if (lag !== null || latency !== null) renderLag(lag, latency);
    renderStats();
  });

  client.on("translation.flush", (ev) => {
    counts.flush += 1;
    addCell("flush", `flush (${ev.trigger || "?"})${ev.text ? `: “${ev.text}”` : ""}`, 200);
    if (ev.text) {
      commitPending();
      const end = typeof ev.session_ms === "number" ? ev.session_ms : (lastEmitEnd ?? 0);
      appendTarget(ev.text, lastEmitEnd ?? end, end, "tgt flush", `flush: ${ev.trigger || ""}`);
    }
    line = null; // a flush ends the line: what follows starts a new one
    renderStats();
  });

  // Spoken translation catching up (rtc_agent.apps.interpret.speech): faster speech or skipped stale text.
  client.on("translation.speech.catchup", (ev) => {
    if (speechBehind) {
      const lag = Number(ev.lag_ms);
      const behind = ev.action !== "normal" && Number.isFinite(lag) && lag > SPEECH_LAG_MS;
      speechBehind.hidden = !behind;
      speechBehind.textContent = behind ? `speech ${behindText(lag)}` : "";
    }
    if (!lagEl) return;
    lagEl.dataset.speechSpeed = String(ev.speed ?? 1);
    const note = ev.action === "skip" ? "speech skipped stale text" : ev.action === "speed" ? `speech ×${Number(ev.speed || 1).toFixed(2)}` : "";
    lagEl.title = note ? `Per-chunk latency and averages · ${note} (speech lag ${(Number(ev.lag_ms || 0) / 1000).toFixed(1)} s)` : "Per-chunk latency and averages";
  });

  client.on("translation.reset", (ev) => {
    counts.reset += 1;
    addCell("reset", `context reset (${ev.reason || "?"})`, 200);
    for (const pane of [sourceText, targetText]) {
      if (pane) pane.append(el("span", "cut", "⋯ "));
    }
    renderStats();
  });

  client.addEventListener("statechange", (ev) => {
    if (ev.detail.state === "connecting") {
      for (const k of Object.keys(counts)) counts[k] = 0;
      lags = [];
      latencies = [];
      // the texts stay until the user clears them; a new session starts on a new line
      line = null;
      lastEmitEnd = null;
      sourceMode = null;
      partialRow?.remove(); // an unfinished caption of the last session
      partialRow = null;
      timeline?.replaceChildren();
      renderLag(null, null);
      renderStats();
    }
    if (speechBehind && ev.detail.state !== "connected") speechBehind.hidden = true;
  });

  return {
    configure(sessionConfig) {
      // the embedded engine recognizes the source too when asked (the captions pipeline on the same Whisper)
      return { ...sessionConfig, ...languages(), ...(speakNow() ? {} : { speak: false }),
        ...(embeddedSt ? { source_text: true } : {}) };
    },
    reset() {
      commitPending();
      line = null;
      if (speechBehind) speechBehind.hidden = true;
    },
    cues: () => ({ source: sourceCues, target: targetCues }),
  };
}
