// Mesh: browser-to-browser media for a call room, one RTCPeerConnection per other participant.
//
// Signaling goes through the server as `room.signal {to, kind: "offer"|"answer"|"candidate", payload}` on the
// events data channel; the server validates it and relays it with `from` (DESIGN.md section 4, "Calls").
// Negotiation follows the "perfect negotiation" pattern (W3C WebRTC, example 9.x): both sides may offer at
// any time; on a collision the impolite side (the larger participant id) ignores the incoming offer and the
// polite side rolls back its own. The newcomer starts every connection (it adds its tracks, which fires
// negotiationneeded); the others create theirs when the first offer arrives.
//
// ICE servers: the same STUN/TURN list the server hands out at GET /v1/ice-servers (time-limited TURN
// credentials), passed in by the caller.
//
// Events (an EventTarget): "track" {id, stream}, "state" {id, state}, "close" {id}.

export class Mesh extends EventTarget {
  /**
   * @param {object} opts
   * @param {string} opts.selfId                 this participant's id (the server's session id)
   * @param {(to: string, kind: string, payload: any) => void} opts.signal   sends a room.signal
   * @param {RTCConfiguration} [opts.rtcConfig]  ICE servers and transport policy
   * @param {MediaStream|null} [opts.stream]     the local camera + microphone
   */
  constructor({ selfId, signal, rtcConfig = {}, stream = null }) {
    super();
    this.selfId = selfId;
    this.signal = signal;
    this.rtcConfig = rtcConfig;
    this.stream = stream;
    this.peers = new Map(); // id -> {pc, polite, makingOffer, ignoreOffer, stream, pendingCandidates}
  }

  _emit(name, detail) {
    this.dispatchEvent(new CustomEvent(name, { detail }));
  }

  /** The peer connection to `id`, created on first use with the local tracks added. `initiator`: also ask to
   * receive the kinds we do not send (the answering side gets those m-lines from the offer). addTrack, not
   * addTransceiver, so an incoming offer reuses these transceivers instead of needing a second round. */
  peer(id, initiator = false) {
    let peer = this.peers.get(id);
    if (peer) return peer;
    const pc = new RTCPeerConnection(this.rtcConfig);
    peer = { pc, polite: this.selfId < id, makingOffer: false, ignoreOffer: false, stream: null, pending: [] };
    this.peers.set(id, peer);
    const local = this.stream;
    const tracks = local ? local.getTracks() : [];
    for (const kind of ["audio", "video"]) {
      const track = tracks.find((t) => t.kind === kind);
      if (track) pc.addTrack(track, local);
      else if (initiator) pc.addTransceiver(kind, { direction: "recvonly" });
    }
    pc.addEventListener("negotiationneeded", async () => {
      try {
        peer.makingOffer = true;
        await pc.setLocalDescription();
        this.signal(id, "offer", { type: pc.localDescription.type, sdp: pc.localDescription.sdp });
      } catch (err) {
        console.warn(`mesh: offer to ${id} failed`, err);
      } finally {
        peer.makingOffer = false;
      }
    });
    pc.addEventListener("icecandidate", ({ candidate }) => {
      if (candidate) this.signal(id, "candidate", candidate.toJSON());
    });
    pc.addEventListener("track", (ev) => {
      if (!peer.stream) peer.stream = ev.streams && ev.streams[0] ? ev.streams[0] : new MediaStream();
      if (!peer.stream.getTracks().includes(ev.track)) peer.stream.addTrack(ev.track);
      this._emit("track", { id, stream: peer.stream, track: ev.track });
    });
    pc.addEventListener("connectionstatechange", () => {
      this._emit("state", { id, state: pc.connectionState });
      if (pc.connectionState === "failed") pc.restartIce();
    });
    return peer;
  }

  /** Start a connection to `id` (the newcomer calls this for everyone already in the room). */
  connect(id) {
    return this.peer(id, true);
  }

  /** A relayed room.signal from participant `from`. */
  async handleSignal(from, kind, payload) {
    const peer = this.peer(from);
    const { pc } = peer;
    try {
      if (kind === "offer" || kind === "answer") {
        const description = { type: kind, sdp: payload && payload.sdp };
        const collision = kind === "offer" && (peer.makingOffer || pc.signalingState !== "stable");
        peer.ignoreOffer = !peer.polite && collision;
        if (peer.ignoreOffer) return;
        await pc.setRemoteDescription(description); // rolls back our own offer on a collision (polite side)
        for (const candidate of peer.pending.splice(0)) await pc.addIceCandidate(candidate).catch(() => {});
        if (kind === "offer") {
          await pc.setLocalDescription();
          this.signal(from, "answer", { type: pc.localDescription.type, sdp: pc.localDescription.sdp });
        }
      } else if (kind === "candidate" && payload) {
        if (!pc.remoteDescription) {
          peer.pending.push(payload);
          return;
        }
        try {
          await pc.addIceCandidate(payload);
        } catch (err) {
          if (!peer.ignoreOffer) throw err;
        }
      }
    } catch (err) {
      console.warn(`mesh: ${kind} from ${from} failed`, err);
    }
  }

  /** Swap the local microphone or camera track on every connection (no renegotiation). */
  async replaceTrack(kind, track) {
    for (const { pc } of this.peers.values()) {
      const transceiver = pc.getTransceivers().find((t) => t.receiver.track && t.receiver.track.kind === kind);
      if (transceiver) await transceiver.sender.replaceTrack(track).catch(() => {});
    }
  }

  close(id) {
    const peer = this.peers.get(id);
    if (!peer) return;
    this.peers.delete(id);
    peer.pc.close();
    this._emit("close", { id });
  }

  closeAll() {
    for (const id of [...this.peers.keys()]) this.close(id);
  }

  /** Per-peer receive numbers from getStats (frames decoded, audio energy) for the page's tests and readouts. */
  async stats() {
    const out = {};
    for (const [id, { pc }] of this.peers) {
      const report = await pc.getStats();
      const entry = { state: pc.connectionState, framesDecoded: 0, audioEnergy: 0, audioBytes: 0 };
      report.forEach((s) => {
        if (s.type !== "inbound-rtp") return;
        if (s.kind === "video") entry.framesDecoded += s.framesDecoded || 0;
        if (s.kind === "audio") {
          entry.audioEnergy += s.totalAudioEnergy || 0;
          entry.audioBytes += s.bytesReceived || 0;
        }
      });
      out[id] = entry;
    }
    return out;
  }
}
