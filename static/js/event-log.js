// A bounded, append-only event log (the last `limit` lines) rendered into #event-log.

const HEARTBEAT_TYPES = new Set(["ping", "pong"]);

function clock() {
  const d = new Date();
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** A compact one-line summary of an event's payload (type, event_id and session_ms left out). */
export function summarize(event, maxLength = 240) {
  const rest = {};
  for (const [k, v] of Object.entries(event)) {
    if (k === "type" || k === "event_id") continue;
    rest[k] = v;
  }
  let text = "";
  try {
    text = JSON.stringify(rest);
  } catch {
    text = String(rest);
  }
  if (text === "{}") text = "";
  return text.length > maxLength ? `${text.slice(0, maxLength - 1)}…` : text;
}

export class EventLog {
  /**
   * @param {HTMLElement|null} element       the log container (#event-log)
   * @param {object} [opts]
   * @param {number} [opts.limit]            lines kept
   * @param {HTMLInputElement|null} [opts.heartbeatToggle]  checkbox: also show ping/pong
   */
  constructor(element, { limit = 200, heartbeatToggle = null, metricsToggle = null, filterInput = null } = {}) {
    this.element = element;
    this.limit = limit;
    this.heartbeatToggle = heartbeatToggle;
    this.metricsToggle = metricsToggle; // checkbox: also show `metrics` events (hidden by default: every 2 s)
    this.filterInput = filterInput; // text input: show only lines whose type contains this text
    this.count = 0;
    if (filterInput) filterInput.addEventListener("input", () => this.applyFilter());
  }

  get showMetrics() {
    return this.metricsToggle ? this.metricsToggle.checked : false;
  }

  /** Hide the lines whose type does not contain the filter text (case-insensitive). */
  applyFilter() {
    if (!this.element) return;
    const want = (this.filterInput && this.filterInput.value || "").trim().toLowerCase();
    for (const line of this.element.children) {
      const type = line.querySelector(".log-type");
      line.hidden = Boolean(want) && !(type && type.textContent.toLowerCase().includes(want));
    }
  }

  get showHeartbeats() {
    return this.heartbeatToggle ? this.heartbeatToggle.checked : false;
  }

  /**
   * Add a line. `direction` is "in" (server event), "out" (client event) or "sys" (client-side note).
   * `level` is "info" | "warn" | "error" | "debug".
   */
  add(direction, label, detail = "", level = "info") {
    if (!this.element) return;
    const el = this.element;
    const stick = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
    const line = document.createElement("div");
    line.className = `log-line log-${direction} log-${level}`;
    const time = document.createElement("span");
    time.className = "log-time";
    time.textContent = clock();
    const dir = document.createElement("span");
    dir.className = "log-dir";
    dir.textContent = direction === "in" ? "↓" : direction === "out" ? "↑" : "•";
    dir.title = direction === "in" ? "from server" : direction === "out" ? "to server" : "client";
    const type = document.createElement("span");
    type.className = "log-type";
    type.textContent = label;
    line.append(time, " ", dir, " ", type);
    if (detail) {
      const body = document.createElement("span");
      body.className = "log-detail";
      body.textContent = ` ${detail}`;
      line.append(body);
    }
    const want = (this.filterInput && this.filterInput.value || "").trim().toLowerCase();
    if (want && !label.toLowerCase().includes(want)) line.hidden = true;
    el.append(line);
    this.count += 1;
    while (el.childElementCount > this.limit) el.firstElementChild.remove();
    if (stick) el.scrollTop = el.scrollHeight;
  }

  /** Log a protocol event (skipping heartbeats unless the toggle is on). */
  event(direction, event) {
    if (HEARTBEAT_TYPES.has(event.type) && !this.showHeartbeats) return;
    if (event.type === "metrics" && !this.showMetrics) return;
    const level = event.type === "error" ? "error" : "info";
    this.add(direction, event.type, summarize(event), level);
  }

  note(message, level = "info") {
    this.add("sys", level === "error" ? "error" : level === "warn" ? "warning" : "client", message, level);
  }

  clear() {
    if (this.element) this.element.replaceChildren();
  }

  text() {
    return this.element ? this.element.innerText : "";
  }
}
