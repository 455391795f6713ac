// OpenAI's WebRTC browser flow against rtc-agent (templates/realtime.html).
//
//   1. POST /v1/realtime/client_secrets        -> { value: "ek_...", expires_at, session }
//   2. RTCPeerConnection + microphone track + data channel "oai-events"
//   3. POST /v1/realtime/calls  (Authorization: Bearer ek_..., Content-Type: application/sdp, body: offer.sdp)
//      -> 201 application/sdp answer
//   4. GA events on the data channel: session.created, response.output_audio_transcript.delta, ...
//
// The only step OpenAI's guide does not have: ICE servers are fetched from /v1/ice-servers (with the same key),
// so a server behind NAT can hand out TURN. window.realtimeDemo exposes the state for tests.

const $ = (id) => document.getElementById(id);
const state = { events: [], level: 0, maxLevel: 0, pc: null, dc: null, reply: "" };
window.realtimeDemo = state;

function setState(text) {
  $("state").textContent = text;
}

function log(event) {
  state.events.push(event);
  const line = `${event.type}${event.delta && typeof event.delta === "string" && event.type.includes("transcript")
    ? ": " + event.delta : ""}${event.error ? ": " + event.error.message : ""}`;
  const pre = $("event-log");
  pre.textContent = (pre.textContent + line + "\n").slice(-20000);
  pre.scrollTop = pre.scrollHeight;
}

function meter(stream) {
  // Level of the reply audio as it plays (what a listener hears).
  const ctx = new AudioContext();
  const source = ctx.createMediaStreamSource(stream);
  const analyser = ctx.createAnalyser();
  analyser.fftSize = 2048;
  source.connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  const tick = () => {
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (const x of buf) sum += x * x;
    state.level = Math.sqrt(sum / buf.length);
    state.maxLevel = Math.max(state.maxLevel, state.level);
    $("level").textContent = state.level.toFixed(3);
    if (state.pc) requestAnimationFrame(tick);
  };
  ctx.resume().then(tick);
}

async function connect() {
  $("connect").disabled = true;
  setState("minting an ephemeral key");
  const tokenResponse = await fetch("/v1/realtime/client_secrets", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ session: { type: "realtime", audio: { input: { transcription: { model: "whisper-1" } } } } }),
  });
  if (!tokenResponse.ok) throw new Error(`client secret: ${tokenResponse.status} ${await tokenResponse.text()}`);
  const EPHEMERAL_KEY = (await tokenResponse.json()).value;

  let iceServers = [];
  const ice = await fetch("/v1/ice-servers", { headers: { Authorization: `Bearer ${EPHEMERAL_KEY}` } });
  if (ice.ok) iceServers = (await ice.json()).ice_servers || [];

  const pc = new RTCPeerConnection({ iceServers });
  state.pc = pc;
  const audioEl = $("remote-audio");
  pc.ontrack = (e) => {
    audioEl.srcObject = e.streams[0];
    meter(e.streams[0]);
  };
  pc.onconnectionstatechange = () => setState(pc.connectionState);
  const ms = await navigator.mediaDevices.getUserMedia({ audio: true });
  pc.addTrack(ms.getTracks()[0]);

  const dc = pc.createDataChannel("oai-events");
  state.dc = dc;
  dc.addEventListener("open", () => {
    $("text").disabled = false;
    $("send").disabled = false;
  });
  dc.addEventListener("message", (e) => {
    const event = JSON.parse(e.data);
    log(event);
    if (event.type === "response.output_audio_transcript.delta") {
      state.reply += event.delta;
      $("reply").textContent = state.reply;
    } else if (event.type === "response.created") {
      state.reply = "";
    }
  });

  const offer = await pc.createOffer();
  await pc.setLocalDescription(offer);
  setState("calling");
  const sdpResponse = await fetch("/v1/realtime/calls?model=gpt-realtime", {
    method: "POST",
    body: offer.sdp,
    headers: { Authorization: `Bearer ${EPHEMERAL_KEY}`, "Content-Type": "application/sdp" },
  });
  if (sdpResponse.status !== 201) throw new Error(`call: ${sdpResponse.status} ${await sdpResponse.text()}`);
  state.callLocation = sdpResponse.headers.get("Location");
  await pc.setRemoteDescription({ type: "answer", sdp: await sdpResponse.text() });
  $("hangup").disabled = false;
}

function send(text) {
  state.dc.send(JSON.stringify({
    type: "conversation.item.create",
    item: { type: "message", role: "user", content: [{ type: "input_text", text }] },
  }));
  state.dc.send(JSON.stringify({ type: "response.create" }));
}

function hangup() {
  if (state.pc) state.pc.close();
  state.pc = null;
  setState("closed");
  $("hangup").disabled = true;
  $("connect").disabled = false;
}

$("connect").addEventListener("click", () => connect().catch((err) => {
  setState("failed");
  log({ type: "page.error", error: { message: String(err) } });
  $("connect").disabled = false;
}));
$("hangup").addEventListener("click", hangup);
$("text-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("text").value.trim();
  if (text && state.dc && state.dc.readyState === "open") {
    send(text);
    $("text").value = "";
  }
});
document.body.dataset.ready = "true";
