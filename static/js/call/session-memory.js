// What a reload of the call page must not lose, in sessionStorage (this tab only; private mode remembers
// nothing): whether this tab is in a call (then a reload rejoins by itself), with which room, name, languages and
// mute state, and the room transcript shown so far (bounded: MAX_SAVED_LINES lines, MAX_SAVED_CHARS characters).

const JOINED_KEY = "rtc-agent.call.joined";
const LINES_KEY = "rtc-agent.call.transcript";

export const MAX_SAVED_LINES = 200;
export const MAX_SAVED_CHARS = 120_000;
const MAX_TEXT = 2000; // one saved line's text or translation

function read(key) {
  try {
    const raw = sessionStorage.getItem(key);
    return raw ? JSON.parse(raw) : null;
  } catch {
    return null;
  }
}

function write(key, value) {
  try {
    if (value === null) sessionStorage.removeItem(key);
    else sessionStorage.setItem(key, JSON.stringify(value));
  } catch {
    /* private mode or full: a reload then starts over */
  }
}

const text = (v) => (typeof v === "string" ? v.slice(0, MAX_TEXT) : "");

export const sessionMemory = {
  /** The call this tab is in ({room, name, speak, hear, textOnly, interpret, muted, cameraOff}), or null. */
  joined() {
    const v = read(JOINED_KEY);
    return v && typeof v === "object" && typeof v.room === "string" ? v : null;
  },

  /** This tab is in a call with `choice` (a reload rejoins it). */
  rememberJoin(choice) {
    write(JOINED_KEY, {
      room: String(choice.room), name: text(choice.name).slice(0, 40), speak: text(choice.speak).slice(0, 16),
      hear: text(choice.hear).slice(0, 16), textOnly: Boolean(choice.textOnly), interpret: choice.interpret !== false,
      muted: Boolean(choice.muted), cameraOff: Boolean(choice.cameraOff),
    });
  },

  /** Update some fields of the remembered call (a mute, a language change); nothing when not in one. */
  update(fields) {
    const now = this.joined();
    if (now) this.rememberJoin({ ...now, ...fields });
  },

  /** The user left: a reload shows the pre-join screen. */
  forgetJoin() {
    write(JOINED_KEY, null);
  },

  /** The transcript lines saved for `room` (oldest first), each {key, speaker, name, time, text, tr, trLang, final}. */
  lines(room) {
    const v = read(LINES_KEY);
    if (!v || v.room !== room || !Array.isArray(v.lines)) return [];
    return v.lines.filter((l) => l && typeof l.key === "string").slice(-MAX_SAVED_LINES);
  },

  /** Keep `lines` (the newest last) as `room`'s transcript, within the bounds. */
  saveLines(room, lines) {
    let kept = lines.slice(-MAX_SAVED_LINES).map((l) => ({
      key: text(l.key), speaker: text(l.speaker), name: text(l.name).slice(0, 64), time: text(l.time).slice(0, 8),
      text: text(l.text), tr: text(l.tr), trLang: text(l.trLang).slice(0, 16), final: Boolean(l.final),
    }));
    let size = JSON.stringify(kept).length;
    while (kept.length && size > MAX_SAVED_CHARS) {
      size -= JSON.stringify(kept[0]).length + 1;
      kept = kept.slice(1);
    }
    write(LINES_KEY, { room, lines: kept });
  },

  /** Drop the saved transcript (another room, or the user left). */
  forgetLines() {
    write(LINES_KEY, null);
  },
};
