// The call page's live room transcript: one line per (speaker, caption segment), bounded to MAX_LINES; its lines
// as plain records (snapshotLines) and back (restoreLines), so a reload keeps them (session-memory.js).
// The list is not a live region: finished captions are announced once, through the page's announcer.

import { el, stickToEnd, trimChildren } from "../dom.js";

const MAX_LINES = 500;

function clock(date = new Date()) {
  return date.toTimeString().slice(0, 8);
}

function makeLine(list, key, speakerId, name, time) {
  const li = el("li", "segment partial");
  li.dataset.key = key;
  li.dataset.speaker = speakerId;
  const body = el("span", "segment-text");
  body.append(el("span", "text"), el("span", "tr"));
  li.append(el("span", "segment-time", time), el("span", "who", name), body);
  stickToEnd(list, () => list.append(li));
  trimChildren(list, MAX_LINES);
  return li;
}

/** The <li> of `speaker`'s segment `segmentId` in `list` (made, stamped with the time, when `create`). */
export function transcriptLine(list, speaker, segmentId, create = true) {
  const key = `${speaker.participant_id}:${segmentId}`;
  const li = list.querySelector(`li[data-key="${CSS.escape(key)}"]`);
  if (li || !create) return li;
  return makeLine(list, key, speaker.participant_id, speaker.name, clock());
}

/** The lines of `list` as records {key, speaker, name, time, text, tr, trLang, final} (oldest first). */
export function snapshotLines(list) {
  return [...list.querySelectorAll("li[data-key]")].map((li) => ({
    key: li.dataset.key,
    speaker: li.dataset.speaker || "",
    name: li.querySelector(".who")?.textContent || "",
    time: li.querySelector(".segment-time")?.textContent || "",
    text: li.querySelector(".text")?.textContent || "",
    tr: li.querySelector(".tr")?.textContent || "",
    trLang: li.querySelector(".tr")?.lang || "",
    final: li.classList.contains("final"),
  }));
}

/** Append saved `records` (snapshotLines) to `list` (at mount, before any live line); known keys are skipped. */
export function restoreLines(list, records) {
  for (const r of records) {
    if (list.querySelector(`li[data-key="${CSS.escape(r.key)}"]`)) continue;
    const li = makeLine(list, r.key, r.speaker, r.name, r.time);
    li.querySelector(".text").textContent = r.text;
    const tr = li.querySelector(".tr");
    tr.textContent = r.tr;
    if (r.trLang) tr.lang = r.trLang;
    if (r.final) li.classList.replace("partial", "final");
    li.dataset.restored = "true";
  }
}
