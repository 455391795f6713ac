// The call page's live room transcript: one line per (speaker, caption segment), bounded to MAX_LINES.

import { el, stickToEnd, trimChildren } from "../dom.js";

const MAX_LINES = 500;

function clock(date = new Date()) {
  return date.toTimeString().slice(0, 8);
}

/** The <li> of `speaker`'s segment `segmentId` in `list` (made, stamped with the time, when `create`). */
export function transcriptLine(list, speaker, segmentId, create = true) {
  const key = `${speaker.participant_id}:${segmentId}`;
  let li = list.querySelector(`li[data-key="${CSS.escape(key)}"]`);
  if (!li && create) {
    li = el("li", "segment partial");
    li.dataset.key = key;
    li.dataset.speaker = speaker.participant_id;
    const body = el("span", "segment-text");
    body.append(el("span", "text"), el("span", "tr"));
    li.append(el("span", "segment-time", clock()), el("span", "who", speaker.name), body);
    stickToEnd(list, () => list.append(li));
    trimChildren(list, MAX_LINES);
  }
  return li;
}
