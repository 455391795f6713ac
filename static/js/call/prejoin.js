// The call page's pre-join screen: one form (the room when no join link fixes it, my name, "I speak", "I want to
// hear"), a preview of my camera and a level meter of my microphone (devices.js, meters.js), who is already in
// the room (GET /v1/rooms/{room}, polled while the form is up), and one primary "Join" (the form's submit: Enter in
// a field joins too). Keyboard order: room, name, languages, Join; then the preview's controls.

import { LevelMeter } from "../meters.js";
import { ROOM_NAME, roomPresence, setRoomInLocation } from "./room-links.js";

export const PRESENCE_POLL_MS = 5000;

/** "Ann, Ben and Chen": a list of names in words. */
export function nameList(names) {
  return names.length > 1 ? `${names.slice(0, -1).join(", ")} and ${names.at(-1)}` : names[0] || "";
}

/** The words for a presence summary ({participants, count, max_participants}, or null: unknown). */
export function presenceText(summary) {
  if (!summary) return "";
  const names = summary.participants.map((p) => String(p.name || "Guest"));
  if (!names.length) return "Nobody is in this room yet.";
  const max = Number(summary.max_participants) || 0;
  const full = max && names.length >= max ? ` The room is full (${max} people).` : "";
  return `Already here: ${nameList(names)}.${full}`;
}

export class PreJoin {
  /**
   * @param {object} o
   * @param {Function} o.$            getElementById
   * @param {object} o.devices        the page's DeviceManager
   * @param {string} o.room           the room to start with
   * @param {string|null} o.joinToken a join link's token (the room is then fixed)
   * @param {Function} o.onJoin       the form was submitted (valid)
   * @param {Function} o.onRoom       the room name changed (valid)
   */
  constructor({ $, devices, room, joinToken, onJoin, onRoom }) {
    this.$ = $;
    this.devices = devices;
    this.room = room;
    this.joinToken = joinToken;
    this.form = $("call-setup");
    this.roomInput = $("room-input");
    this.presenceEl = $("room-presence");
    this.previewNote = $("preview-note");
    this.previewBtn = $("preview-start");
    this.meter = new LevelMeter($("prejoin-level"));
    this._timer = null;
    this._generation = 0;
    this._shown = false;
    this.summary = null;

    this.roomInput.value = room;
    this.roomInput.readOnly = Boolean(joinToken);
    if (joinToken) this.roomInput.title = "This join link is for this room";
    this.roomInput.addEventListener("input", () => this._roomTyped(onRoom));
    this.form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (!this._roomValid()) {
        this.roomInput.reportValidity();
        return;
      }
      onJoin();
    });
    devices.addEventListener("change", ({ detail }) => {
      if (detail.audioTrack) this.meter.attach(detail.stream);
      else this.meter.detach();
      this._renderDevices();
    });
    this.previewBtn.addEventListener("click", () => this.startPreview());
    document.addEventListener("visibilitychange", () => {
      if (this._shown && document.visibilityState === "visible") this.refreshPresence();
    });
  }

  _roomValid() {
    const ok = ROOM_NAME.test(this.roomInput.value.trim());
    this.roomInput.setCustomValidity(ok ? "" : "1-64 letters, digits, '-' or '_', starting with a letter or digit");
    return ok;
  }

  _roomTyped(onRoom) {
    if (this.joinToken || !this._roomValid()) return;
    const room = this.roomInput.value.trim();
    if (room === this.room) return;
    this.room = room;
    setRoomInLocation(room);
    onRoom(room);
    this.refreshPresence();
  }

  /** Show the form (not in a call): presence is polled, and the preview opened unless `preview` is false. */
  show({ preview = true, focus = true } = {}) {
    const wasShown = this._shown;
    this._shown = true;
    if (!wasShown) this.refreshPresence();
    if (preview && !this.devices.audioTrack) this.startPreview();
    this._renderDevices();
    if (focus) this.$("call-name").focus({ preventScroll: true });
  }

  /** Hide the form (joining or in the call): no more polling. */
  hide() {
    this._shown = false;
    clearTimeout(this._timer);
    this._timer = null;
  }

  /** Open the microphone (and camera) for the preview; a refusal is said under it, with a button to try again. */
  async startPreview() {
    this.previewNote.textContent = "Opening the microphone and camera…";
    try {
      await this.devices.open();
    } catch (err) {
      this.previewNote.textContent = err.message;
      this.previewBtn.hidden = false;
      return;
    }
    this._renderDevices();
  }

  _renderDevices() {
    const { audioTrack, videoTrack } = this.devices;
    this.previewBtn.hidden = Boolean(audioTrack);
    if (!audioTrack) {
      if (!this.previewNote.textContent) this.previewNote.textContent = "Preview off.";
      return;
    }
    const parts = [`Microphone: ${audioTrack.label || "default"}`];
    parts.push(videoTrack ? `camera: ${videoTrack.label || "default"}` : "no camera");
    this.previewNote.textContent = `${parts.join("; ")}.`;
  }

  /** Read who is in the room now, and again every PRESENCE_POLL_MS while the form is up and the tab visible. */
  async refreshPresence() {
    clearTimeout(this._timer);
    this._timer = null;
    const generation = ++this._generation; // one polling chain: a newer read supersedes this one
    const summary = await roomPresence(this.room, this.joinToken);
    if (generation !== this._generation) return;
    this.summary = summary;
    this.presenceEl.textContent = presenceText(summary);
    this.presenceEl.hidden = !summary;
    this.presenceEl.dataset.count = summary ? String(summary.count) : "";
    if (this._shown && document.visibilityState === "visible") {
      this._timer = setTimeout(() => this.refreshPresence(), PRESENCE_POLL_MS);
    }
  }
}
