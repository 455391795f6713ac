// Local capture devices: the microphone and camera selects, getUserMedia, live switching.

const AUDIO_PROCESSING = { echoCancellation: true, noiseSuppression: true, autoGainControl: true };
const AUDIO_RAW = { echoCancellation: false, noiseSuppression: false, autoGainControl: false };

/** A readable message for a getUserMedia failure. */
export function describeMediaError(err, what = "microphone") {
  switch (err && err.name) {
    case "NotAllowedError":
    case "SecurityError":
      return `Permission to use the ${what} was denied. Allow it in the browser's site settings and try again.`;
    case "NotFoundError":
    case "OverconstrainedError":
      return `No ${what} was found (or the selected one is gone).`;
    case "NotReadableError":
      return `The ${what} is in use by another application or cannot be read.`;
    default:
      if (!navigator.mediaDevices) {
        return "This page needs a secure context (https:// or http://localhost) to use the microphone.";
      }
      return `Could not open the ${what}: ${err && err.message ? err.message : err}`;
  }
}

export class DeviceManager extends EventTarget {
  /**
   * @param {object} opts
   * @param {HTMLSelectElement|null} opts.micSelect
   * @param {HTMLSelectElement|null} opts.cameraSelect
   * @param {HTMLInputElement|null}  opts.processingToggle  checkbox: browser voice processing (AEC/NS/AGC)
   * @param {boolean} opts.video     whether the app uses the camera at all
   */
  constructor({ micSelect = null, cameraSelect = null, processingToggle = null, video = false } = {}) {
    super();
    this.micSelect = micSelect;
    this.cameraSelect = cameraSelect;
    this.processingToggle = processingToggle;
    this.video = Boolean(video);
    this.audioTrack = null;
    this.videoTrack = null;
    this.stream = new MediaStream();
    this.hasPermission = false;

    if (this.cameraSelect && !this.video) {
      this.cameraSelect.disabled = true;
      this.cameraSelect.title = "This app does not use the camera";
    }
    if (navigator.mediaDevices && navigator.mediaDevices.addEventListener) {
      navigator.mediaDevices.addEventListener("devicechange", () => this.refresh().catch(() => {}));
    }
  }

  get supported() {
    return Boolean(navigator.mediaDevices && navigator.mediaDevices.getUserMedia);
  }

  audioConstraints() {
    const processing = this.processingToggle ? this.processingToggle.checked : true;
    const c = { ...(processing ? AUDIO_PROCESSING : AUDIO_RAW), channelCount: 1 };
    const id = this.micSelect && this.micSelect.value;
    if (id) c.deviceId = { exact: id };
    return c;
  }

  videoConstraints() {
    const c = { width: { ideal: 1280 }, height: { ideal: 720 }, frameRate: { ideal: 30 } };
    const id = this.cameraSelect && this.cameraSelect.value;
    if (id) c.deviceId = { exact: id };
    return c;
  }

  /** Fill the selects from enumerateDevices; labels appear only after permission was granted. */
  async refresh() {
    if (!navigator.mediaDevices || !navigator.mediaDevices.enumerateDevices) return;
    const devices = await navigator.mediaDevices.enumerateDevices();
    this._fill(this.micSelect, devices.filter((d) => d.kind === "audioinput"), "Microphone",
      this.audioTrack);
    if (this.video) {
      this._fill(this.cameraSelect, devices.filter((d) => d.kind === "videoinput"), "Camera",
        this.videoTrack);
    } else if (this.cameraSelect) {
      this._fill(this.cameraSelect, [], "Camera", null, "Not used by this app");
    }
  }

  _fill(select, devices, noun, liveTrack, emptyLabel = null) {
    if (!select) return;
    const previous = select.value;
    const liveId = liveTrack && liveTrack.getSettings ? liveTrack.getSettings().deviceId : null;
    select.replaceChildren();
    const real = devices.filter((d) => d.deviceId);
    if (!real.length) {
      const opt = new Option(emptyLabel || (devices.length ? `Default ${noun.toLowerCase()}` : `No ${noun.toLowerCase()} found`), "");
      select.append(opt);
      return;
    }
    real.forEach((d, i) => {
      select.append(new Option(d.label || `${noun} ${i + 1}`, d.deviceId));
    });
    const want = liveId || previous;
    if (want && real.some((d) => d.deviceId === want)) select.value = want;
  }

  /** Open the mic (and camera when the app uses it). Returns {audioTrack, videoTrack, stream}. */
  async open() {
    if (!this.supported) throw new Error(describeMediaError(null));
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: this.audioConstraints(),
        video: this.video ? this.videoConstraints() : false,
      });
    } catch (err) {
      if (this.video && err && (err.name === "NotFoundError" || err.name === "NotReadableError"
          || err.name === "OverconstrainedError" || err.name === "NotAllowedError")) {
        // No usable camera (missing, busy, or denied): go on with audio only rather than failing the whole
        // session. A denied microphone fails the audio-only request below with its own message.
        stream = await navigator.mediaDevices.getUserMedia({ audio: this.audioConstraints() }).catch((e) => {
          throw new Error(describeMediaError(e, "microphone"));
        });
        this.dispatchEvent(new CustomEvent("warning", {
          detail: { message: `Camera unavailable (${describeMediaError(err, "camera")}); continuing with audio only.` },
        }));
      } else {
        throw new Error(describeMediaError(err, this.video ? "microphone and camera" : "microphone"));
      }
    }
    this.hasPermission = true;
    this.audioOnly = this.video && stream.getVideoTracks().length === 0;
    this._setTracks(stream.getAudioTracks()[0] || null, stream.getVideoTracks()[0] || null);
    await this.refresh().catch(() => {});
    return { audioTrack: this.audioTrack, videoTrack: this.videoTrack, stream: this.stream };
  }

  /** Reopen one kind ("audio" | "video") with the current selection. Returns the new track. */
  async switch(kind) {
    const isAudio = kind === "audio";
    const what = isAudio ? "microphone" : "camera";
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia(
        isAudio ? { audio: this.audioConstraints() } : { video: this.videoConstraints() },
      );
    } catch (err) {
      throw new Error(describeMediaError(err, what));
    }
    const track = isAudio ? stream.getAudioTracks()[0] : stream.getVideoTracks()[0];
    if (isAudio) this._setTracks(track, this.videoTrack);
    else this._setTracks(this.audioTrack, track);
    return track;
  }

  _setTracks(audioTrack, videoTrack) {
    const old = [this.audioTrack, this.videoTrack];
    this.audioTrack = audioTrack;
    this.videoTrack = videoTrack;
    for (const t of old) {
      if (t && t !== audioTrack && t !== videoTrack) t.stop();
    }
    this.stream = new MediaStream([audioTrack, videoTrack].filter(Boolean));
    this.dispatchEvent(new CustomEvent("change", { detail: { stream: this.stream, audioTrack, videoTrack } }));
  }

  /** Stop capturing (the mic indicator goes off). */
  close() {
    for (const t of [this.audioTrack, this.videoTrack]) if (t) t.stop();
    this.audioTrack = null;
    this.videoTrack = null;
    this.stream = new MediaStream();
    this.dispatchEvent(new CustomEvent("change", { detail: { stream: this.stream, audioTrack: null, videoTrack: null } }));
  }
}
