// One mute state per page: the microphone ("mic": true = muted) and the camera ("camera": true = off).
//
// Every control of a kind (the sidebar's Mute, an app's own "Mute mic", Alt+M, push-to-talk) reads and writes
// this one state through `set(kind, value)`; every button bound with `bind(kind, button)` shows it the same way
// (aria-pressed, label, disabled), and the capture tracks follow it (track.enabled), including tracks opened later
// (a device switch, a reconnect). Listeners hear "change" {kind, value, source} once per real change: page.js
// tells the server (input_audio.muted), an app tells its room (session.update {mic_muted}).

/** The label every control of a kind shows, by state (the same text everywhere). */
export const TOGGLE_LABELS = {
  mic: { off: "Mute mic", on: "Unmute mic" },
  camera: { off: "Camera off", on: "Camera on" },
};

export class MediaToggles extends EventTarget {
  /** `devices`: the page's DeviceManager (its audioTrack / videoTrack follow the state). */
  constructor({ devices }) {
    super();
    this.devices = devices;
    this.state = { mic: false, camera: false };
    this.controls = { mic: new Set(), camera: new Set() };
    this.live = false;
    devices.addEventListener("change", () => this._applyTracks());
  }

  /** Whether the microphone is muted. */
  get muted() {
    return this.state.mic;
  }

  /** Whether the camera is off. */
  get cameraOff() {
    return this.state.camera;
  }

  /** Make `button` a control of `kind` ("mic" | "camera"): a click toggles the state; it shows the state. */
  bind(kind, button) {
    if (!button || this.controls[kind].has(button)) return;
    this.controls[kind].add(button);
    button.addEventListener("click", () => this.set(kind, !this.state[kind], { source: button.id || kind }));
    this._render(kind);
  }

  /** Set `kind` to `value` (true: muted / off). Returns whether it changed; "change" fires only then. */
  set(kind, value, { source = "api" } = {}) {
    if (!(kind in this.state)) throw new Error(`unknown media toggle ${kind}`);
    const next = Boolean(value);
    const changed = next !== this.state[kind];
    this.state[kind] = next;
    this._applyTracks();
    this._render(kind);
    if (changed) this.dispatchEvent(new CustomEvent("change", { detail: { kind, value: next, source } }));
    return changed;
  }

  /** Whether a session is live: the controls are enabled only then (the camera's only with a camera track). */
  setLive(live) {
    this.live = Boolean(live);
    this._render("mic");
    this._render("camera");
  }

  _applyTracks() {
    const { audioTrack, videoTrack } = this.devices;
    if (audioTrack) audioTrack.enabled = !this.state.mic;
    if (videoTrack) videoTrack.enabled = !this.state.camera;
    this._render("camera"); // a camera track may have come or gone
  }

  _render(kind) {
    const on = this.state[kind];
    const label = TOGGLE_LABELS[kind][on ? "on" : "off"];
    const usable = this.live && (kind === "mic" || Boolean(this.devices.videoTrack));
    for (const button of this.controls[kind]) {
      button.setAttribute("aria-pressed", String(on));
      button.textContent = label;
      button.disabled = !usable;
    }
    document.body.dataset[kind === "mic" ? "muted" : "cameraOff"] = String(on);
  }
}
