// The call's captions and translations as this page shows them: under each speaker's tile (partial, final,
// translation) and as lines of the room transcript, which a reload keeps (call/session-memory.js). Finished
// captions of others are announced once (call/announcer.js): a speaker's own words when I read its language, its
// translation when I read another; never partials, never a late joiner's replayed lines.

import { sessionMemory } from "./session-memory.js";
import { restoreLines, snapshotLines, transcriptLine } from "./transcript-lines.js";

const SAVE_DELAY_MS = 400;
const base = (code) => String(code || "").split("-")[0].toLowerCase();

export class RoomCaptions {
  /**
   * @param {object} o
   * @param {HTMLElement} o.transcript   the room transcript list
   * @param {object} o.stage             call/stage.js (tiles, participants, my id)
   * @param {object} o.lags              lag-badges.js
   * @param {object} o.announcer         call/announcer.js
   * @param {() => string} o.listenLanguage  the language I read
   * @param {string|null} o.restoreRoom  a reload's room: its saved lines are shown again
   */
  constructor({ transcript, stage, lags, announcer, listenLanguage, restoreRoom }) {
    this.list = transcript;
    this.stage = stage;
    this.lags = lags;
    this.announcer = announcer;
    this.listenLanguage = listenLanguage;
    this.room = restoreRoom; // the room whose lines the transcript shows
    this._saveTimer = null;
    if (restoreRoom) restoreLines(transcript, sessionMemory.lines(restoreRoom));
    window.addEventListener("pagehide", () => this.saveNow()); // a reload keeps even the last second's lines
  }

  /** Save the transcript now (a save may be waiting). */
  saveNow() {
    if (this._saveTimer === null) return;
    clearTimeout(this._saveTimer);
    this._saveTimer = null;
    sessionMemory.saveLines(this.room, snapshotLines(this.list));
  }

  /** Joined `room`: a transcript of another room is cleared (here and in the session memory). */
  joined(room) {
    if (this.room === room) return;
    this.list.replaceChildren();
    sessionMemory.forgetLines();
    this.room = room;
  }

  _save() {
    if (this._saveTimer !== null || !this.room) return;
    this._saveTimer = setTimeout(() => {
      this._saveTimer = null;
      sessionMemory.saveLines(this.room, snapshotLines(this.list));
    }, SAVE_DELAY_MS);
  }

  /** Whether I read speaker `id`'s words translated. */
  _translatedForMe(id) {
    const p = this.stage.participants.get(id);
    return Boolean(p && p.language && p.language !== "auto" && base(p.language) !== base(this.listenLanguage()));
  }

  /** A caption.partial (`final` false) or caption.final. */
  caption(ev, final) {
    const speaker = ev.speaker || { participant_id: this.stage.myId, name: "You" };
    this.lags.caption(speaker.participant_id, ev);
    const text = final ? ev.text : [ev.committed, ev.tentative].filter(Boolean).join(" ");
    const tile = this.stage.tileFor(speaker.participant_id);
    if (tile) {
      const box = tile.querySelector(".tile-caption");
      if (final) box.querySelector(".final").textContent = ev.text;
      box.querySelector(".partial").textContent = final ? "" : text;
    }
    const li = transcriptLine(this.list, speaker, ev.segment_id);
    li.querySelector(".text").textContent = text;
    if (!final) return;
    li.classList.replace("partial", "final");
    this._save();
    const others = speaker.participant_id !== this.stage.myId;
    if (others && !ev.replayed && !this._translatedForMe(speaker.participant_id)) {
      this.announcer.say(`${speaker.name}: ${ev.text}`);
    }
  }

  /** A caption.translation (pieces of one segment arrive in order). */
  translation(ev) {
    this.lags.translation(ev.speaker.participant_id, ev);
    const tile = this.stage.tileFor(ev.speaker.participant_id);
    if (tile) {
      const line = tile.querySelector(".translation");
      line.textContent = line.dataset.segment === ev.segment_id ? `${line.textContent} ${ev.text}` : ev.text;
      line.dataset.segment = ev.segment_id;
      line.lang = ev.language;
    }
    const li = transcriptLine(this.list, ev.speaker, ev.segment_id);
    const tr = li.querySelector(".tr");
    tr.textContent = `${tr.textContent ? `${tr.textContent} ` : ""}${ev.text}`;
    tr.lang = ev.language;
    this._save();
    if (!ev.replayed && this._translatedForMe(ev.speaker.participant_id)) {
      this.announcer.say(`${ev.speaker.name}: ${ev.text}`);
    }
  }
}
