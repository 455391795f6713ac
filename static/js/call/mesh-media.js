// The call's media between participants in a mesh room (the default mode): one browser-to-browser connection per
// other participant (mesh.js), with the ICE servers the server hands out. call.js's startMedia(mode) calls this
// for mode "mesh"; another mode brings its own module with the same shape (an EventTarget with "track" {id,
// stream, track} and "state" {id, state}, connect(id), handleSignal, replaceTrack, close(id), closeAll, stats).

import { Mesh } from "../mesh.js";

/**
 * The room's mesh for the room.joined event `ev`, or null when `stillJoined()` turned false while the ICE servers
 * loaded (left or rejoined meanwhile). `stream`: my camera and microphone.
 */
export async function startMesh({ client, log, joinToken, ev, stream, stillJoined }) {
  let rtcConfig = { iceServers: [] };
  try {
    rtcConfig = await client.fetchIceServers(joinToken || null);
  } catch (err) {
    log.note(`ICE servers unavailable for the mesh: ${err.message}`, "warn");
  }
  if (!stillJoined()) return null;
  return new Mesh({
    selfId: ev.participant_id,
    rtcConfig,
    refreshConfig: () => client.refreshIceServers(), // TURN credentials expire (turn_ttl_s): ice-servers.js
    stream,
    signal: (to, kind, payload) => client.send({ type: "room.signal", to, kind, payload }),
  });
}
