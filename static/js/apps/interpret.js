// Interpret: simultaneous interpretation (SimulInfer policy). One translation.chunk per processed audio chunk
// (EMIT / WAIT / SKIP), translation.flush when the backlog is re-translated, translation.reset on context cuts.
// Event shapes: DESIGN.md section 4.

import { el, stickToEnd, trimChildren } from "../dom.js";

const MAX_CELLS = 400;
const MAX_SPANS = 600;

export function mount({ client, $ }) {
  const sourceSel = $("source-language");
  const targetSel = $("target-language");
  const speak = $("speak-translation");
  const sourceText = $("source-text");
  const targetText = $("target-text");
  const timeline = $("timeline");
  const lagEl = $("lag");
  const stats = $("timeline-stats");
  const remoteAudio = $("remote-audio");

  const counts = { EMIT: 0, WAIT: 0, SKIP: 0, flush: 0, reset: 0 };
  let lags = [];
  let latencies = [];

  const languages = () => {
    const out = {};
    if (sourceSel && sourceSel.value && sourceSel.value !== "auto") out.source_language = sourceSel.value;
    if (targetSel && targetSel.value) out.target_language = targetSel.value;
    return out;
  };

  const onLanguageChange = () => {
    if (client.connected) client.send({ type: "session.update", session: languages() });
  };
  sourceSel?.addEventListener("change", onLanguageChange);
  targetSel?.addEventListener("change", onLanguageChange);
  if (speak && remoteAudio) {
    const apply = () => {
      remoteAudio.muted = !speak.checked;
    };
    speak.addEventListener("change", apply);
    apply();
  }

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

    if (ev.source_text && sourceText) {
      stickToEnd(sourceText, () => {
        const span = el("span", action === "WAIT" ? "src pending" : "src", `${ev.source_text} `);
        span.title = details;
        sourceText.append(span);
        trimChildren(sourceText, MAX_SPANS);
      });
    }
    if (action === "EMIT" && ev.text && targetText) {
      commitPending();
      stickToEnd(targetText, () => {
        const span = el("span", "tgt", `${ev.text} `);
        span.title = details;
        targetText.append(span);
        trimChildren(targetText, MAX_SPANS);
      });
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
    if (ev.text && targetText) {
      commitPending();
      stickToEnd(targetText, () => {
        const span = el("span", "tgt flush", `${ev.text} `);
        span.title = `flush: ${ev.trigger || ""}`;
        targetText.append(span);
      });
    }
    renderStats();
  });

  // Spoken translation catching up (rtc_agent.apps.interpret.speech): faster speech or skipped stale text.
  client.on("translation.speech.catchup", (ev) => {
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
      sourceText?.replaceChildren();
      targetText?.replaceChildren();
      timeline?.replaceChildren();
      renderLag(null, null);
      renderStats();
    }
  });

  return {
    configure(config) {
      return { ...config, ...languages() };
    },
  };
}
