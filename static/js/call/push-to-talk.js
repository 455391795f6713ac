// Push to talk on the call page: with the box checked the microphone stays muted except while Space is held
// (outside text fields and buttons). It drives the page's one mute state (media-toggles.js), so every mute
// control, the server and the room see exactly what push-to-talk does.

const TYPING = "input, textarea, select, button, [contenteditable=''], [contenteditable='true']";

export class PushToTalk {
  /** `box`: the "Push to talk" checkbox; `toggles`: the page's MediaToggles; `live()`: whether in the call. */
  constructor({ box, toggles, live }) {
    this.box = box;
    this.toggles = toggles;
    this.live = live;
    this.talking = false;
    box.addEventListener("change", () => {
      document.body.dataset.pushToTalk = String(box.checked);
      this.talking = false;
      toggles.set("mic", box.checked, { source: "push-to-talk" }); // on: muted until Space; off: open
    });
    document.addEventListener("keydown", (ev) => {
      if (!box.checked || ev.code !== "Space" || ev.repeat || !this.live() || ev.target.closest?.(TYPING)) return;
      ev.preventDefault();
      this.talking = true;
      toggles.set("mic", false, { source: "push-to-talk" });
    });
    document.addEventListener("keyup", (ev) => {
      if (ev.code !== "Space" || !this.talking) return;
      ev.preventDefault();
      this.release();
    });
    window.addEventListener("blur", () => this.release()); // a key released elsewhere never comes back here
  }

  /** Space is up (or the window lost focus): muted again. */
  release() {
    if (!this.talking) return;
    this.talking = false;
    if (this.box.checked) this.toggles.set("mic", true, { source: "push-to-talk" });
  }
}
