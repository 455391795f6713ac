"""``Settings``: every field the server can be told, with its default, help text and group.

Field names are the contract for TOML keys, flags (``max_sessions`` -> ``--max-sessions``) and environment
variables (``RTC_AGENT_MAX_SESSIONS``); the ``help`` metadata is what ``rtc-agent serve --help`` prints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rtc_agent.config.engine_settings import EngineSettings
from rtc_agent.config.options import ENV_PREFIX, PROJECT_ROOT
from rtc_agent.config.options import opt as _opt

__all__ = ["ENGINE_KINDS", "ENV_PREFIX", "LLM_BATCH_INT8_MODES", "LLM_PRECISIONS", "PROJECT_ROOT", "Settings",
           "SettingsError"]

LLM_PRECISIONS = ("auto", "float32", "bfloat16", "int8", "int4")  # see rtc_agent.engines.llm.precision
LLM_BATCH_INT8_MODES = ("auto", "on", "off")  # see rtc_agent.engines.llm.batch_int8
ENGINE_KINDS = ("asr", "st", "llm", "tts", "vlm")


@dataclass
class ServiceSettings:
    """The server, session, security, state, replica, ICE, SFU and media fields of :class:`Settings`."""

    host: str = _opt("127.0.0.1", "Address to listen on (0.0.0.0 for every interface).")
    port: int = _opt(8080, "TCP port for HTTP and signaling.")
    log_level: str = _opt("info", "Logging level: debug, info, warning or error.")
    max_sessions: int = _opt(16, "Most sessions open at once; more get 503 with Retry-After.", "sessions")
    max_session_seconds: float = _opt(
        4 * 3600.0, "A session is closed after this many seconds (0 = no limit).", "sessions"
    )
    heartbeat_timeout_s: float = _opt(
        10.0, "Close a session when no client message (ping or other) arrived for this long.", "sessions"
    )
    connect_timeout_s: float = _opt(
        15.0, "Close a session whose peer connection and event channel are not up after this long.", "sessions"
    )
    connect_grace_s: float = _opt(
        2.0, "A session not connected yet (pending: it holds no max_sessions slot) is safe for this long from being "
             "closed to make room for a new offer when max_pending_sessions are waiting.", "sessions"
    )
    max_room_participants: int = _opt(
        6, "Most participants in one call room (browser-to-browser mesh); one more gets 409 room_full.", "sessions"
    )
    room_transcripts_kept: int = _opt(16, "Transcripts of this many ended meetings stay downloadable.", "sessions")
    room_max_pairs: int = _opt(
        12, "Most interpretation pairs (speaker, listen language) one call room runs at once; a listener past it "
            "gets an error event with code interpretation_unavailable.", "sessions")
    room_mt_backlog: int = _opt(
        8, "Caption finals of one call room (or of one interpret session on the text route) waiting for text "
           "translation; past it the oldest (a muted speaker's first) are dropped, announced as "
           "translation.speech.catchup with action drop.", "sessions")
    room_replay_lines: int = _opt(
        20, "Transcript lines (with translations in their language) a late joiner of a call room gets.", "sessions")
    room_transcript_max_lines: int = _opt(
        5000, "Lines one call meeting's transcript keeps (in memory and in the state store); later lines are "
              "counted as lines_dropped in transcript.json, not kept.", "sessions")
    room_store_queue: int = _opt(
        1000, "Meeting and transcript writes waiting for the state store (written in order, off the event loop's "
              "critical path); past it a write is dropped (logged once, counted in /health state.meetings).",
        "sessions")
    room_rejoin_grace_s: float = _opt(
        60.0, "An emptied call meeting stays joinable (same meeting, same transcript) this long before it ends.",
        "sessions")
    room_tile_grace_s: float = _opt(
        10.0, "How long a call page keeps the tile of a participant who left or lost its connection (marked "
              "'left' or 'connection lost' at once) before removing it; one who rejoins under the same name within "
              "it takes its tile back.", "sessions")
    max_pending_sessions_per_client: int = _opt(
        4, "Most not-yet-connected sessions one client (API key or IP) may hold at once (429 above).", "sessions"
    )
    max_pending_sessions_per_network: int = _opt(
        8, "Most not-yet-connected sessions one network (an IPv4 /24 or IPv6 /64) may hold at once (429 above).",
        "sessions"
    )
    max_pending_sessions: int = _opt(
        16, "Most not-yet-connected sessions of all clients at once; past it the oldest one that is past "
            "connect_grace_s is closed to make room, so never-connecting offers cannot fill the server.",
        "sessions"
    )
    max_candidates_per_patch: int = _opt(
        20, "Most ICE candidates in one PATCH (400 above; a session takes 5 x this in all).", "sessions"
    )
    ice_allow_loopback_candidates: bool = _opt(
        False, "Accept remote ICE candidates on loopback, link-local (cloud metadata), 0.0.0.0/8, multicast and "
               "broadcast addresses (dropped by default, so the server never sends checks there).", "sessions"
    )
    shutdown_timeout_s: float = _opt(
        10.0, "On shutdown (SIGTERM), at most this many seconds to tell sessions and finish their captions.",
        "sessions"
    )
    shutdown_drain_s: float = _opt(
        2.0, "On SIGTERM, first drain for up to this many seconds: /health answers 503 draining and new sessions "
             "get 503 server_draining (a load balancer moves traffic away) while running sessions go on; then they "
             "end with session.ended server_shutdown (0 = at once).", "sessions"
    )
    final_drain_s: float = _opt(
        3.0, "When a session ends (deleted, shutdown, max duration), wait up to this long for the final caption "
             "of speech still queued.", "sessions"
    )
    json_max_depth: int = _opt(32, "Deepest JSON nesting accepted from clients (HTTP and data channel).",
                               "sessions")
    json_max_number_chars: int = _opt(64, "Longest JSON number literal accepted from clients.", "sessions")
    max_body_bytes: int = _opt(256 * 1024, "Largest JSON or SDP request body accepted (413 above).", "sessions")
    max_event_bytes: int = _opt(64 * 1024, "Largest data-channel message accepted (an error event above).",
                                "sessions")
    api_keys: list[str] = _opt([], "Server API keys (comma-separated, at least 16 characters each). They authorise "
                                   "everything; with none the server is open, which it allows only on loopback.",
                               "security", secret=True)
    insecure_open: bool = _opt(False, "Run without API keys on a non-loopback address: anyone who reaches the port "
                                      "can start sessions. Only for trusted networks.", "security")
    allowed_origins: list[str] = _opt([], "Browser origins (scheme://host[:port]) trusted like the server's own "
                                          "(scheme, host and port): they may use the page sign-in cookie and get "
                                          "credentialed CORS. Other loopback origins, and every origin with *, may "
                                          "call the API with a bearer credential only (the cookie is ignored, or "
                                          "403 where only it would authorise); other origins get 403.", "security")
    allowed_hosts: list[str] = _opt([], "Host names the server answers to besides loopback names, the bound "
                                        "address and (when bound to every interface) IP literals; guards against "
                                        "DNS rebinding; * allows any.", "security")
    trusted_proxies: list[str] = _opt([], "Reverse proxies (IPs/CIDRs, e.g. 127.0.0.1/32) whose forwarding header "
                                      "names the client for rate limits and caps: the right-most address there not "
                                      "itself trusted. Empty: the TCP peer. Proxied is never local (open mode).",
                                      "security")
    trusted_proxy_header: str = _opt("x-forwarded-for", "The one header trusted_proxies name the client in: "
                                     "x-forwarded-for or forwarded (RFC 7239 for=).", "security")
    client_token_ttl_s: int = _opt(300, "Lifetime of client tokens from POST /v1/tokens, in seconds.", "security")
    room_link_ttl_s: int = _opt(
        4 * 3600, "Lifetime of a call room's join link (POST /v1/rooms), in seconds; its holders may join until then.",
        "security")
    page_session_ttl_s: int = _opt(12 * 3600, "Lifetime of a page sign-in (the cookie set by POST /login).",
                                   "security")
    max_client_tokens: int = _opt(10000, "Most unexpired client tokens and page sign-ins kept at once.",
                                  "security")
    rate_sessions_per_minute: int = _opt(60, "Sessions one client (API key or IP) may create per minute "
                                             "(429 above).", "security")
    rate_uploads_per_minute: int = _opt(10, "Uploads to /v1/translate/stream per client per minute.", "security")
    rate_tokens_per_minute: int = _opt(120, "Client tokens one client may mint per minute.", "security")
    rate_logins_per_minute: int = _opt(10, "Page sign-in attempts per IP per minute.", "security")
    max_tokens_per_credential: int = _opt(
        500, "Most unexpired client tokens, client secrets, room links and sign-ins one minting credential (an API "
             "key, a join link whatever addresses use it, a page's IP, a signing-in /24 or /64 network) may hold at "
             "once (429 token_quota_exceeded above); at most max_client_tokens; keeps one holder from filling it.",
        "security")
    room_transcript_ttl_s: int = _opt(24 * 3600, "How long an ended meeting's transcript stays readable (by that "
                                                 "meeting's links only), in seconds.", "security")
    state_url: str = _opt(
        "sqlite:", "Where the server keeps what must outlive a restart (client tokens, sign-ins, join links, rate "
                   "limits): sqlite: (a 0600 file in $XDG_STATE_HOME/rtc-agent, else ~/.local/state/rtc-agent), "
                   "sqlite:///PATH, memory: (this process only) or redis://[:PASSWORD@]HOST:PORT/DB (shared by "
                   "several servers; the password is masked in logs and /health).", "state")
    state_sweep_s: float = _opt(30.0, "How often expired entries are dropped from the state store, in seconds.",
                                "state")
    state_max_value_bytes: int = _opt(512 * 1024, "Largest value the state store keeps (bytes of its text; a "
                                                  "client token with its config, at most max_body_bytes); larger "
                                                  "ones are refused (413 state_limit).", "state")
    state_max_list_items: int = _opt(20000, "Most items one list in the state store holds (e.g. the lines of one "
                                            "transcript); appends past it are refused.", "state")
    node_url: str = _opt(
        "", "How the other rtc-agent nodes sharing this state_url reach this one (http://HOST:PORT, e.g. "
            "http://10.0.0.2:8080): a call room is hosted by one node, and a node that does not host it forwards the "
            "participant's offer there. Empty: a single node (every room here). Needs node_secret and a shared "
            "(redis://) state_url.", "replicas")
    node_id: str = _opt("", "This node's name in logs and forwarded requests (letters, digits, '.', '-', '_'; "
                            "empty: derived from node_url).", "replicas")
    node_secret: str = _opt("", "Secret shared by every node (at least 16 characters): signs the requests one node "
                                "forwards to another, so the owner of a room trusts the client address and the "
                                "rate budget a forwarding node vouches for. Never logged.", "replicas", secret=True)
    room_lease_ttl_s: float = _opt(
        6.0, "A call room belongs to the node holding its lease in the state store, renewed every third of this; "
             "when that node dies its rooms can re-form on another node after at most this many seconds (1-300).",
        "replicas")
    node_forward_timeout_s: float = _opt(
        25.0, "Most seconds a node waits for another node's answer to a request it forwarded (an offer's answer "
              "includes gathering ICE candidates); past it 502 node_timeout (1-120).", "replicas")
    request_read_timeout_s: float = _opt(
        10.0, "A JSON, SDP or form request body (the sign-in form included, read before its key is checked) not "
              "all read within this many seconds gets 408 request_timeout (uploads: upload_read_timeout_s).",
        "security")
    channel_messages_per_s: float = _opt(
        200.0, "Messages per second one WebSocket or data-channel connection may send, with bursts of "
               "channel_burst_s of it; past it a WebSocket is read more slowly (messages still over it are "
               "dropped) and data-channel messages are dropped, with one rate_limited error a second at most.",
        "security")
    channel_bytes_per_s: int = _opt(
        1024 * 1024, "Bytes per second one WebSocket or data-channel connection may send (bursts as above).",
        "security")
    channel_burst_s: float = _opt(2.0, "Burst allowance of the per-connection budgets, in seconds of their rate "
                                       "(the bytes budget holds at least one largest legal message).", "security")
    channel_overload_close_s: float = _opt(
        5.0, "Close a connection that keeps sending past its budget for this many seconds.", "security")
    admission_max_loop_lag_ms: float = _opt(
        300.0, "Refuse new sessions (503) while the event loop's recent lag (p90 over 5 s) is above this "
               "(0 = off).", "security")
    admission_max_queue_delay_ms: float = _opt(
        2500.0, "Refuse new sessions (503) while an engine's recent queueing delay is above this (0 = off).",
        "security")
    admission_capacity: bool = _opt(
        True, "Refuse the session past this machine's measured capacity for its app (503 server_busy); the "
              "capacity is published in /health either way.", "security")
    speed_probe: bool = _opt(True, "Time the preloaded engines once they are loaded (a few seconds of CPU) to "
                                   "derive each app's capacity.", "security")
    capacity_safety: float = _opt(1.25, "Headroom of the capacity rule: sessions = 1 / (this x the machine share "
                                       "one session takes); 1-10.", "security")
    capacity_sessions: list[str] = _opt([], "Sessions per app instead of the measured capacity, e.g. "
                                            "captions=4,agent=2.", "security")
    capacity_running: bool = _opt(True, "Let capacity follow the engines' measured speed under load (each batch's "
                                        "time against the probe's prediction), not the start-up probe alone.",
                                  "security")
    capacity_running_window: int = _opt(20, "Running batches whose median slowdown counts for capacity; 3-1000.",
                                        "security")
    capacity_running_recovery: float = _opt(0.05, "How fast capacity comes back once batches run faster again: "
                                                  "the share of the gap closed per batch, 0.001-1 (it drops at "
                                                  "once).", "security")
    stun_urls: list[str] = _opt([], "STUN server URLs for both peers (comma-separated), e.g. "
                                    "stun:stun.example.org:3478.", "ice")
    turn_urls: list[str] = _opt([], "TURN server URLs (comma-separated), e.g. turn:turn.example.org:3478?"
                                    "transport=udp.", "ice")
    turn_secret: str = _opt("", "Shared secret of coturn's use-auth-secret: clients get time-limited "
                                "credentials (TURN REST API).", "ice", secret=True)
    turn_username: str = _opt("", "Static TURN username (when no turn secret is set).", "ice")
    turn_credential: str = _opt("", "Static TURN password (when no turn secret is set).", "ice", secret=True)
    turn_ttl_s: int = _opt(600, "Lifetime of generated TURN credentials in seconds (60-86400): how long a "
                                "browser may start using them; relays already allocated keep running.", "ice")
    ice_transport_policy: str = _opt("all", "ICE transport policy for browsers: all or relay.", "ice")
    sfu_url: str = _opt("", "How rtc-agent reaches the Janus SFU for rooms past a mesh: its WebSocket API, e.g. "
                            "ws://127.0.0.1:8188, or its HTTP API (long poll), e.g. http://127.0.0.1:8088/janus "
                            "(empty = no SFU: rooms are browser-to-browser meshes only).", "sfu")
    sfu_public_url: str = _opt("", "The Janus WebSocket API URL browsers use to reach the SFU (default: sfu_url; "
                                   "needed when sfu_url is HTTP).", "sfu")
    sfu_api_secret: str = _opt("", "Janus's api_secret, when it has one; never sent to browsers or logged.", "sfu",
                               secret=True)
    sfu_max_listeners: int = _opt(300, "Most listeners (role listener: no media, a count on the page) in one SFU "
                                       "room; one more gets 409 room_full.", "sfu")
    sfu_max_speakers: int = _opt(16, "Most speakers (publishers of audio and video) in one SFU room; one more gets "
                                     "409 room_full.", "sfu")
    sfu_request_timeout_s: float = _opt(10.0, "Longest wait for Janus to be reached or to answer one request "
                                              "(1-120 s).", "sfu")
    sfu_poll_timeout_s: float = _opt(45.0, "HTTP sfu_url only: longest wait for one long poll of events; Janus holds "
                                           "a poll 30 s when it has nothing to say, so this must be above 30 "
                                           "(31-600 s). A poll past it counts as the connection lost.", "sfu")
    sfu_reconnect_attempts: int = _opt(8, "When a room's connection to Janus drops, how many times rtc-agent "
                                          "reconnects (re-creating the room, re-subscribing, re-publishing) before "
                                          "the room goes on without SFU audio (0 = never; 0-100).", "sfu")
    sfu_reconnect_delay_s: float = _opt(1.0, "Wait before the first reconnect to Janus, doubled after each failed "
                                             "attempt up to sfu_reconnect_max_delay_s (0.1-60 s).", "sfu")
    sfu_reconnect_max_delay_s: float = _opt(15.0, "Longest wait between two reconnects to Janus "
                                                  "(sfu_reconnect_delay_s-300 s).", "sfu")
    audio_jitter_frames: int = _opt(0, "Audio frames (20 ms) a receiver waits for after each one before decoding "
                                       "it (aiortc's default is 4: 80 ms). 0 decodes each packet as it arrives "
                                       "and drops reordered ones: the fastest VAD; more tolerates reordering.",
                                    "media")
    video_fps: float = _opt(1.0, "Camera frames per second handed to the apps.", "media")
    video_max_edge: int = _opt(512, "Longest edge in pixels of frames handed to the apps.", "media")
    echo_delay_s: float = _opt(1.0, "Delay of the echo diagnostic app, in seconds.", "media")
    max_output_seconds: float = _opt(120.0, "Most seconds of speech queued on a session's outgoing track.",
                                     "media")


@dataclass
class Settings(EngineSettings, ServiceSettings):
    """Everything the server can be told. Field names are the contract for TOML keys, flags and env vars (the
    service fields come first, then the engines', as ``rtc-agent serve --help`` lists them)."""

    def public(self) -> dict[str, Any]:
        """The settings with secrets masked (``secret`` fields as ``***``, ``*_url``/``*_urls`` without user-info
        or query values), for logs and session descriptions."""
        from rtc_agent.redact import redact_url

        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value:
                value = "***"
            elif f.name.endswith("_url") and isinstance(value, str):
                value = redact_url(value)
            elif f.name.endswith("_urls") and isinstance(value, list):
                value = [redact_url(v) for v in value]
            out[f.name] = value
        return out

    def engine(self, kind: str) -> dict[str, str]:
        """``{"engine", "url", "model"}`` of one engine kind."""
        return {k: getattr(self, f"{kind}_{k}") for k in ("engine", "url", "model")}


class SettingsError(ValueError):
    """A setting could not be read: unknown TOML key, wrong type, bad environment value."""


