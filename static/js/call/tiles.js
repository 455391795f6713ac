// The DOM of one call tile: a participant's video, name, flags (language, muted), presence mark ("left",
// "connection lost", "reconnecting"), lag badge and captions. Captions are not a live region: finished ones are
// announced once through the page's announcer (call/announcer.js).

import { el } from "../dom.js";
import { behindText } from "../lag-badges.js";

/** A tile's presence marks and the words shown for them (absent: the participant is here). */
export const PRESENCE_WORDS = { left: "left", lost: "connection lost", reconnecting: "reconnecting" };

/** A new remote tile for `id`: {el, video} (its name and flags are drawn by renderTile). */
export function makeRemoteTile(id) {
  const tile = el("figure", "tile remote");
  tile.dataset.participantId = id;
  tile.dataset.speaking = "false";
  tile.dataset.ducked = "false";
  tile.dataset.micMuted = "false";
  tile.dataset.presence = "here";
  const video = el("video");
  video.autoplay = true;
  video.playsInline = true;
  const name = el("figcaption", "tile-name");
  const dot = el("span", "speaking-dot");
  dot.setAttribute("aria-hidden", "true");
  name.append(dot, el("span", "name"), document.createTextNode(" "), el("span", "tile-flags"),
    el("span", "tile-status"));
  const lag = el("span", "tile-lag");
  lag.hidden = true;
  const caption = el("div", "tile-caption");
  caption.append(el("span", "final"), document.createTextNode(" "), el("span", "partial"), el("div", "translation"));
  tile.append(video, name, lag, caption);
  return { el: tile, video };
}

/** Draw `info` (room.joined / room.participant.* participant) on `tile`: flags, muted states, and the name
 * unless `withName` is false (the self tile keeps "You"). */
export function renderTile(tile, info, { withName = true } = {}) {
  if (withName) tile.querySelector(".name").textContent = info.name;
  const flags = [];
  if (info.language && info.language !== "auto") flags.push(info.language);
  if (info.mic_muted) flags.push("muted");
  if (info.camera_muted) flags.push("camera off");
  tile.querySelector(".tile-flags").textContent = flags.join(" · ");
  tile.dataset.cameraMuted = info.camera_muted ? "true" : "false";
  tile.dataset.micMuted = info.mic_muted ? "true" : "false";
}

/** Mark `tile` with a presence `mark` (a PRESENCE_WORDS key), or null: the participant is here. */
export function renderPresence(tile, mark) {
  if (!tile) return;
  tile.dataset.presence = mark || "here";
  const status = tile.querySelector(".tile-status");
  if (status) status.textContent = mark ? PRESENCE_WORDS[mark] : "";
  if (mark === "left" || mark === "lost") tile.dataset.speaking = "false";
}

/** Empty `tile`'s captions, translation, lag and speaking state (its participant left, or I did). */
export function clearTile(tile) {
  if (!tile) return;
  for (const part of tile.querySelectorAll(".tile-caption .final, .tile-caption .partial, .tile-caption .translation")) {
    part.textContent = "";
  }
  tile.dataset.speaking = "false";
  renderLag(tile, null);
}

/** Show `lag` ({ms, what} from LagBadges, or null to clear) on `tile`'s badge. */
export function renderLag(tile, lag) {
  const badge = tile && tile.querySelector(".tile-lag");
  if (!badge) return;
  badge.hidden = !lag;
  badge.textContent = lag ? behindText(lag.ms) : "";
  badge.title = lag ? `${lag.what === "captions" ? "Captions" : "Interpretation"} ${behindText(lag.ms)} the speech` : "";
  if (lag) tile.dataset.lagMs = String(Math.round(lag.ms));
  else delete tile.dataset.lagMs;
}
