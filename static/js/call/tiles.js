// The DOM of one call tile: a participant's video, name, flags (language, muted), lag badge and captions.

import { el } from "../dom.js";
import { behindText } from "../lag-badges.js";

/** A new remote tile for `id`: {el, video} (its name and flags are drawn by renderTile). */
export function makeRemoteTile(id) {
  const tile = el("figure", "tile remote");
  tile.dataset.participantId = id;
  tile.dataset.speaking = "false";
  tile.dataset.ducked = "false";
  const video = el("video");
  video.autoplay = true;
  video.playsInline = true;
  const name = el("figcaption", "tile-name");
  name.append(el("span", "speaking-dot"), el("span", "name"), el("span", "tile-flags"));
  const lag = el("span", "tile-lag");
  lag.hidden = true;
  const caption = el("div", "tile-caption");
  caption.setAttribute("aria-live", "polite");
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
  tile.querySelector(".tile-flags").textContent = flags.join(" · ");
  tile.dataset.cameraMuted = info.camera_muted ? "true" : "false";
  tile.dataset.micMuted = info.mic_muted ? "true" : "false";
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
