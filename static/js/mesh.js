import { IceRefresher, realClock, rtcConfiguration, selectedPair, turnExpiry } from "./ice-servers.js";

// Mesh: browser-to-browser media for a call room, one RTCPeerConnection per other participant.
//
// Signaling goes through the server as `room.signal {to, kind: "offer"|"answer"|"candidate", payload}` on the
// events data channel; the server validates it and relays it with `from` (DESIGN.md section 4, "Calls").
// Negotiation follows the "perfect negotiation" pattern (W3C WebRTC, example 9.x): both sides may offer at
// any time; on a collision the impolite side (the larger participant id) ignores the incoming offer and the
// polite side rolls back its own. The newcomer starts every connection (it adds its tracks, which fires
// negotiationneeded); the others create theirs when the first offer arrives.
//
// ICE servers: the same STUN/TURN list the server hands out at GET /v1/ice-servers, passed in by the caller.
// Its TURN credentials expire (turn_ttl_s): with `refreshConfig` the mesh keeps them fresh (ice-servers.js:
// a fetch at 80 % of the TTL, applied to every connection with setConfiguration), fetches fresh ones before
// it opens a connection with stale ones, and before every ICE restart (a failed connection).
//
// Events (an EventTarget): "track" {id, stream}, "state" {id, state}, "close" {id}.

export class Mesh extends EventTarget {
  /**
   * @param {object} opts
   * @param {string} opts.selfId                 this participant's id (the server's session id)
   * @param {(to: string, kind: string, payload: any) => void} opts.signal   sends a room.signal
   * @param {object} [opts.rtcConfig]         ICE servers and transport policy (RtcClient.fetchIceServers)
   * @param {(() => Promise<object>)|null} [opts.refreshConfig]  fetches fresh ICE servers (RtcClient
   *                                             .refreshIceServers); null: the join-time ones are kept
   * @param {MediaStream|null} [opts.stream]     the local camera + microphone
   * @param {object} [opts.clock]                {now, setTimeout, clearTimeout}, for tests
   */
  constructor({ selfId, signal, rtcConfig = {}, refreshConfig = null, stream = null, clock = realClock }) {
    super();
    this.selfId = selfId;
    this.signal = signal;
    this.stream = stream;
    this.peers = new Map(); // id -> {pc, polite, makingOffer, ignoreOffer, stream, pendingCandidates}
    this.ice = new IceRefresher({ config: rtcConfig, fetchConfig: refreshConfig, clock,
                                  onConfig: (config) => this._applyConfig(config) }).start();
  }

  /** The ICE configuration new connections get (the latest fetched). */
  get rtcConfig() {
    return this.ice.config;
  }

  /** Fresh credentials for every open connection: used by their next gathering (a restart, a new m-line). */
  _applyConfig(config) {
    for (const [id, { pc }] of this.peers) {
      try {
        pc.setConfiguration({ ...pc.getConfiguration(), ...rtcConfiguration(config) });
      } catch (err) {
        console.warn(`mesh: new ICE servers for ${id} refused`, err);
      }
    }
  }

  /** Restart ICE to `id` with fresh ICE servers (its connection failed). */
  async restartIce(id) {
    await this.ice.refresh(); // applies to every connection, this one included
    const peer = this.peers.get(id);
    if (peer) peer.pc.restartIce();
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
    if (this.ice.stale()) this.ice.refresh(); // the offer below waits for it (negotiationneeded)
    const pc = new RTCPeerConnection(rtcConfiguration(this.ice.config));
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
        await this.ice.fresh(); // never gather relay candidates with expired credentials
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
      if (pc.connectionState === "failed") this.restartIce(id).catch((err) => console.warn("mesh: restart", err));
    });
    return peer;
  }

  /** Start a connection to `id` (the newcomer calls this for everyone already in the room). */
  connect(id) {
    return this.peer(id, true);
  }

  /** A relayed room.signal from participant `from`. */
  async handleSignal(from, kind, payload) {
    if (kind === "offer" && !this.peers.has(from)) await this.ice.fresh(); // its answer gathers candidates
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

  /** Close every connection and stop refreshing ICE servers (the mesh is done). */
  closeAll() {
    this.ice.stop();
    for (const id of [...this.peers.keys()]) this.close(id);
  }

  /** Per-peer receive numbers from getStats (frames decoded, audio energy) for the page's tests and readouts. */
  async stats() {
    const out = {};
    for (const [id, { pc }] of this.peers) {
      const report = await pc.getStats();
      const entry = { state: pc.connectionState, framesDecoded: 0, audioEnergy: 0, audioBytes: 0,
                      ...selectedPair(report), turnExpiry: turnExpiry(pc.getConfiguration()),
                      iceRefreshes: this.ice.refreshes };
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
