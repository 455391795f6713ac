// Echo (diagnostic): the server plays the microphone back after one second. This module measures what the
// user hears: whether audio came back, its peak level and the onset-to-onset delay between the microphone
// and the returned audio (the 1 s server delay plus capture, network, jitter buffer and playback).

const ONSET_THRESHOLD = 0.02;
const QUIET_BEFORE_ONSET_MS = 250;

function onsetTracker(meter, onOnset) {
  let quietSince = performance.now();
  let active = false;
  meter.onSample((level, now) => {
    if (level >= ONSET_THRESHOLD) {
      if (!active && now - quietSince >= QUIET_BEFORE_ONSET_MS) onOnset(now);
      active = true;
    } else {
      if (active) quietSince = now;
      active = false;
    }
  });
}

export function mount({ client, meters, $ }) {
  const heard = $("echo-heard");
  const peak = $("echo-peak");
  const delay = $("echo-delay");
  const status = $("echo-status");
  const inputOnsets = [];
  const delays = [];

  const reset = () => {
    inputOnsets.length = 0;
    delays.length = 0;
    if (heard) heard.textContent = "—";
    if (peak) peak.textContent = "—";
    if (delay) delay.textContent = "—";
  };

  onsetTracker(meters.input, (t) => {
    inputOnsets.push(t);
    if (inputOnsets.length > 50) inputOnsets.shift();
  });
  onsetTracker(meters.output, (t) => {
    // Match the output onset with the latest input onset at least 500 ms earlier (the echo is 1 s late).
    const candidates = inputOnsets.filter((x) => t - x >= 500 && t - x <= 5000);
    if (!candidates.length) return;
    const d = t - candidates[candidates.length - 1];
    delays.push(d);
    if (delays.length > 20) delays.shift();
    const avg = delays.reduce((a, b) => a + b, 0) / delays.length;
    if (delay) {
      delay.textContent = `${Math.round(d)} ms`;
      delay.title = `average of ${delays.length}: ${Math.round(avg)} ms`;
      delay.dataset.ms = d.toFixed(0);
    }
  });
  meters.output.onSample(() => {
    const p = meters.output.peak;
    if (peak) peak.textContent = p > 0 ? `${(20 * Math.log10(p)).toFixed(1)} dBFS` : "—";
    if (heard && p >= ONSET_THRESHOLD) {
      heard.textContent = "yes";
      if (status) status.dataset.state = "ok";
    }
  });
  client.addEventListener("statechange", (ev) => {
    if (ev.detail.state === "connecting") {
      reset();
      if (status) status.dataset.state = "waiting";
      if (heard) heard.textContent = "not yet";
    }
  });
  return {};
}
