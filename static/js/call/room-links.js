// The call page's room: its name from the URL (or a new random one), the join link's token, the client token
// that names the room, the share link, and the room transcript downloads.
//
// A join link is /call?room=NAME#join=rj_...: the fragment's join token is exchanged for this participant's
// single-use client token (POST /v1/tokens with Authorization: Bearer rj_...), so people without an API key or
// page sign-in can join that room, and only that room, until the link expires.

import { el } from "../dom.js";
import { AgentError } from "../rtc-client.js";

/** A room name the server takes: 1-64 letters, digits, "-" or "_", starting with a letter or digit. */
export const ROOM_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

function randomRoom() {
  const bytes = new Uint8Array(5);
  crypto.getRandomValues(bytes);
  return `room-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** {room, joinToken, params}: the room of ?room= (a new random one when absent or bad, written back to the URL). */
export function roomFromLocation() {
  const params = new URLSearchParams(location.search);
  const room = ROOM_NAME.test(params.get("room") || "") ? params.get("room") : randomRoom();
  const joinToken = new URLSearchParams(location.hash.slice(1)).get("join");
  if (params.get("room") !== room) {
    params.set("room", room);
    history.replaceState(null, "", `${location.pathname}?${params}${location.hash}`);
  }
  return { room, joinToken, params };
}

/** Write `room` into the page's URL (?room=), keeping the rest (a typed room name; a reload then opens it). */
export function setRoomInLocation(room) {
  const params = new URLSearchParams(location.search);
  params.set("room", room);
  history.replaceState(null, "", `${location.pathname}?${params}${location.hash}`);
}

/**
 * This participant's client token names the room (the call app's config needs it); with a join link, the link's
 * token pays for it (no sign-in needed), otherwise the page sign-in cookie or open mode does. `roomOf()` is the
 * room at the time of the fetch (the pre-join form may change it).
 */
export function clientTokenFetcher(roomOf, joinToken) {
  return async () => {
    const room = roomOf();
    const headers = { "Content-Type": "application/json", Accept: "application/json" };
    if (joinToken) headers.Authorization = `Bearer ${joinToken}`;
    const res = await fetch("/v1/tokens", {
      method: "POST",
      credentials: "same-origin",
      headers,
      body: JSON.stringify({ app: "call", config: { room } }),
    });
    if (!res.ok) {
      const body = await res.json().catch(() => ({}));
      const what = joinToken ? "The join link was refused" : "No client token";
      const error = body.error || {};
      throw new AgentError(`${what}: ${error.message || `HTTP ${res.status}`}`, {
        type: error.type || "http_error", code: error.code || `http_${res.status}`, status: res.status,
      });
    }
    return (await res.json()).value;
  };
}

/** The link others join with: the join link itself, a new one (POST /v1/rooms), or the plain room URL. */
export async function shareLink(room, joinToken) {
  if (joinToken) return `${location.origin}/call?room=${encodeURIComponent(room)}#join=${encodeURIComponent(joinToken)}`;
  try {
    const res = await fetch("/v1/rooms", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ room }),
    });
    if (res.ok) return `${location.origin}${(await res.json()).url}`;
  } catch {
    /* fall back to the plain link */
  }
  return `${location.origin}/call?room=${encodeURIComponent(room)}`;
}

/** Who is in `room` now ({participants: [{name}], count, max_participants}; GET /v1/rooms/{room}), or null when
 * this page may not read it (or the server does not say). */
export async function roomPresence(room, joinToken) {
  const headers = { Accept: "application/json", ...(joinToken ? { Authorization: `Bearer ${joinToken}` } : {}) };
  try {
    const res = await fetch(`/v1/rooms/${encodeURIComponent(room)}`, { headers, credentials: "same-origin", cache: "no-store" });
    if (!res.ok) return null;
    const body = await res.json();
    return body && Array.isArray(body.participants) ? body : null;
  } catch {
    return null;
  }
}

/** Save the room transcript as `fmt` ("vtt" or "json"); a failure is shown on `errors`. */
export async function downloadTranscript(room, joinToken, fmt, errors) {
  const headers = joinToken ? { Authorization: `Bearer ${joinToken}` } : {};
  const res = await fetch(`/v1/rooms/${encodeURIComponent(room)}/transcript.${fmt}`, { headers, credentials: "same-origin" });
  if (!res.ok) {
    errors.show(res.status === 404 ? "No transcript yet for this room." : `Download failed (${res.status})`);
    return;
  }
  const url = URL.createObjectURL(await res.blob());
  const a = el("a");
  a.href = url;
  a.download = `${room}.${fmt}`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
