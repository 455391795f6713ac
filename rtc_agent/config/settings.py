"""``Settings``: every field the server can be told, with its default, help text and group.

Field names are the contract for TOML keys, flags (``max_sessions`` -> ``--max-sessions``) and environment
variables (``RTC_AGENT_MAX_SESSIONS``); the ``help`` metadata is what ``rtc-agent serve --help`` prints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "RTC_AGENT_"
LLM_PRECISIONS = ("auto", "float32", "bfloat16", "int8", "int4")  # see rtc_agent.engines.llm.precision
ENGINE_KINDS = ("asr", "st", "llm", "tts", "vlm")
PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


def _opt(default: Any, help: str, group: str = "server", **extra: Any) -> Any:
    meta = {"help": help, "group": group, **extra}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    """Everything the server can be told. Field names are the contract for TOML keys, flags and env vars."""

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
        8, "Caption finals of one call room waiting for text translation; past it the oldest (a muted speaker's "
           "first) are dropped, announced as translation.speech.catchup with action drop.", "sessions")
    room_replay_lines: int = _opt(
        20, "Transcript lines (with translations in their language) a late joiner of a call room gets.", "sessions")
    room_rejoin_grace_s: float = _opt(
        60.0, "An emptied call meeting stays joinable (same meeting, same transcript) this long before it ends.",
        "sessions")
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
    audio_jitter_frames: int = _opt(0, "Audio frames (20 ms) a receiver waits for after each one before decoding "
                                       "it (aiortc's default is 4: 80 ms). 0 decodes each packet as it arrives "
                                       "and drops reordered ones: the fastest VAD; more tolerates reordering.",
                                    "media")
    video_fps: float = _opt(1.0, "Camera frames per second handed to the apps.", "media")
    video_max_edge: int = _opt(512, "Longest edge in pixels of frames handed to the apps.", "media")
    echo_delay_s: float = _opt(1.0, "Delay of the echo diagnostic app, in seconds.", "media")
    max_output_seconds: float = _opt(120.0, "Most seconds of speech queued on a session's outgoing track.",
                                     "media")
    preload: list[str] = _opt(["vad", "asr", "tts", "llm"],
                              "Engines to load in the background at start-up, so the first session does not wait "
                              "(comma-separated; empty = load on first use).", "engines")
    cache_dir: str = _opt(str(Path.home() / ".cache" / "rtc-agent"),
                          "Folder for assembled and converted model files.", "engines")
    static_dir: str = _opt(str(PROJECT_ROOT / "static"), "Folder of the browser client's static files.", "pages")
    templates_dir: str = _opt(str(PROJECT_ROOT / "templates"), "Folder of the page templates.", "pages")
    # Engine switches, the same for every kind (DESIGN.md section 6).
    asr_engine: str = _opt("embedded", "Speech recognition engine: embedded or openai.", "engines")
    asr_url: str = _opt("", "Base URL of an OpenAI-compatible ASR server.", "engines")
    asr_model: str = _opt("", "ASR model: empty = the packaged Whisper base; a CTranslate2 model folder; or a "
                              "faster-whisper name (large-v3, ...) already in the Hugging Face cache.", "engines")
    asr_device: str = _opt("cpu", "Device of the embedded ASR engine: cpu, cuda or auto.", "engines")
    asr_compute_type: str = _opt("default", "CTranslate2 compute type (int8, float16, int8_float16, ...); default "
                                            "= int8 on CPU, float16 on CUDA.", "engines")
    asr_threads: int = _opt(0, "CPU threads of each embedded ASR decode; two run at once (0 = auto: half the "
                                  "cores each, at least 1).", "engines")
    asr_language: str = _opt("auto", "Spoken language for captions: a Whisper code such as en, or auto.", "engines")
    captions_context_s: float = _opt(
        16.0, "Most seconds of a session's earlier speech the final decode of a caption also hears (more: closer to "
              "offline accuracy, slower finals; 0: none).", "engines")
    captions_final_budget_ms: int = _opt(
        450, "Time a caption's final decode may take: the earlier speech it hears is cut to fit, from how fast "
             "recent final decodes ran (under load it hears less, so sessions stay real time).", "engines")
    asr_api_key: str = _opt("", "API key for the remote ASR server.", "engines", secret=True)
    vad_threshold: float = _opt(0.5, "Speech probability above which Silero VAD starts speech.", "engines")
    vad_min_silence_ms: int = _opt(250, "Silence that ends an utterance, in ms.", "engines")
    vad_min_speech_ms: int = _opt(200, "Shortest speech that counts as an utterance, in ms.", "engines")
    agent_barge_in_min_ms: int = _opt(300, "Speech over the agent's reply must be loud for this many ms before "
                                           "it cancels the reply (shorter: echo, breathing; 0-2000; per session: "
                                           "config barge_in_min_ms).", "engines")
    agent_barge_in_floor_dbfs: float = _opt(-40.0, "Speech quieter than this (RMS dBFS) never interrupts the "
                                                   "agent (breathing, room noise; -90 to 0).", "engines")
    agent_barge_in_margin_db: float = _opt(10.0, "Speech must be this many dB above the input heard while the "
                                                 "agent speaks (its residual echo, background talk) to interrupt "
                                                 "it (0-40).", "engines")
    st_engine: str = _opt("embedded", "Speech translation engine: embedded, openai or cascade.", "engines")
    st_url: str = _opt("", "Base URL of an OpenAI-compatible speech-translation server.", "engines")
    st_model: str = _opt("", "Speech-translation model name or path.", "engines")
    st_api_key: str = _opt("", "API key for the remote speech-translation server.", "engines", secret=True)
    st_mode: str = _opt("target", "What the remote speech LLM answers: target (translation only) or source+target "
                                  "(transcript and translation).", "engines")
    st_chunk_ms: int = _opt(800, "Interpretation chunk after the first 1600 ms one: 800 or 1600 ms.", "engines")
    st_window_s: float = _opt(24.0, "Cut the interpretation context after this many seconds of speech (0 = only "
                                    "on the model's length limit and token budget).", "engines")
    st_max_model_len: int = _opt(8192, "Context length in tokens of the remote speech-translation model (the "
                                       "policy cuts its context before the budget runs out).", "engines")
    st_max_lag_s: float = _opt(3.0, "Spoken translation lag (s) above which speech speeds up or skips stale text.",
                               "engines")
    st_max_upload_bytes: int = _opt(32 * 1024 * 1024, "Largest audio upload to /v1/translate/stream (413 above).",
                                    "limits")
    st_max_upload_seconds: float = _opt(1800.0, "Longest audio /v1/translate/stream translates: refused (413 "
                                                "audio_too_long) when the file's header says more, stopped with an "
                                                "error event when decoding passes it.", "limits")
    upload_read_timeout_s: float = _opt(20.0, "An upload that sends no data for this long gets 408 "
                                              "(upload_timeout).", "limits")
    upload_deadline_s: float = _opt(120.0, "An upload whose body is not all read this many seconds after the "
                                           "request started gets 408 (upload_timeout).", "limits")
    max_instructions_chars: int = _opt(8000, "Longest agent instructions (config, session.update) and tool output "
                                             "accepted (400 / error config_too_large above).", "limits")
    max_tools: int = _opt(32, "Most tools a page may declare in session.update (config_too_large above).", "limits")
    max_tool_schema_bytes: int = _opt(16384, "Largest total JSON size of the tools a page declares "
                                             "(config_too_large above).", "limits")
    max_text_field_chars: int = _opt(1000, "Longest other free-text config field or client text (filler, vision "
                                           "prompt, user message...; config_too_large above).", "limits")
    llm_engine: str = _opt("embedded", "LLM engine: embedded or openai.", "engines")
    llm_url: str = _opt("", "Base URL of an OpenAI-compatible chat-completions server.", "engines")
    llm_model: str = _opt("", "LLM model: empty = the packaged default (see README); smollm2-135m or "
                              "qwen2.5-coder-0.5b; a .gguf or transformers "
                              "folder; or the remote server's model name (empty = its first model).", "engines")
    llm_api_key: str = _opt("", "API key for the remote LLM server.", "engines", secret=True)
    llm_precision: str = _opt("auto", "Embedded LLM precision: auto (int4 weights for decode steps and short "
                                      "prompts, bfloat16 for long ones, on CPUs with native bf16; else float32), "
                                      "float32, bfloat16, int8 or int4.", "engines")
    mt_engine: str = _opt("auto", "Text translation engine: auto (ctranslate2 when mt_model_dir is set, else "
                                  "openai when mt_url is set, else embedded), embedded (the packaged LLM, a rough "
                                  "fallback), openai, ctranslate2 or none.", "engines")
    mt_url: str = _opt("", "Base URL of an OpenAI-compatible chat server that translates text.", "engines")
    mt_model: str = _opt("", "Text translation model: the remote server's model name (empty = its first), or "
                             "for embedded a packaged LLM name (empty = llm_model's).", "engines")
    mt_api_key: str = _opt("", "API key for the remote text translation server.", "engines", secret=True)
    mt_model_dir: str = _opt("", "A CTranslate2 translation model folder (OPUS-MT/Marian or NLLB, converted with "
                                 "ct2-transformers-converter) for mt_engine ctranslate2.", "engines")
    mt_max_chars: int = _opt(2000, "Longest text one translation request may hold (text_too_long above).", "limits")
    mt_timeout_s: float = _opt(30.0, "Most seconds a remote text translation may stay silent.", "engines")
    mt_beam: int = _opt(2, "Beam size of the CTranslate2 text translation model (1 = greedy, fastest).", "engines")
    tts_engine: str = _opt("embedded", "Text-to-speech engine: embedded or openai.", "engines")
    tts_url: str = _opt("", "Base URL of an OpenAI-compatible /v1/audio/speech server.", "engines")
    tts_model: str = _opt("", "TTS model: empty = the packaged Piper joe voice; a Piper .onnx file; or the "
                              "remote server's model name.", "engines")
    tts_voice: str = _opt("alloy", "Voice name for the remote TTS server.", "engines")
    tts_api_key: str = _opt("", "API key for the remote TTS server.", "engines", secret=True)
    tts_speed: float = _opt(1.0, "Speaking rate (1.0 = the voice's own).", "engines")
    tts_response_format: str = _opt("wav", "Audio format asked of the remote TTS server: wav or pcm.", "engines")
    tts_concurrency: int = _opt(4, "Requests in flight to the remote TTS server.", "engines")
    # Speech in the listener's language (engines/tts/languages.py): which engine speaks which language.
    tts_language: str = _opt("en", "Language (ISO 639-1) of the configured TTS voice: en for the packaged Piper "
                                   "joe voice and the remote tts_voice.", "engines")
    tts_voices: list[str] = _opt([], "More languages the remote TTS server speaks, as LANG=VOICE (comma-separated, "
                                     "e.g. es=nova,fr=echo).", "engines")
    tts_multilingual: str = _opt("auto", "Speech in the languages the TTS engine does not speak: auto (the packaged "
                                         "Kokoro voice for es, de, it, pt), kokoro (Kokoro for those even "
                                         "where the engine speaks them) or off (those languages are text only).",
                                 "engines")
    kokoro_voices: list[str] = _opt([], "Kokoro voice per language as LANG=VOICE (jf_alpha, jf_gongitsune, "
                                        "jf_nezumi, jf_tebukuro, jm_kumo); a language Kokoro reads through espeak-ng "
                                        "but does not by default (fr, hi) is added this way; empty = the measured "
                                        "best voices.", "engines")
    kokoro_threads: int = _opt(0, "CPU threads of the Kokoro voice (0 = auto: half the cores, at least 1).",
                               "engines")
    vlm_engine: str = _opt("embedded", "Vision engine: embedded (scene describer), transformers, moss, or "
                                       "sglang/openai (remote).", "engines")
    vlm_url: str = _opt("", "URL of a remote realtime vision service.", "engines")
    vlm_model: str = _opt("", "Vision model name or path.", "engines")

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


