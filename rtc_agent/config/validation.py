"""``validate``: refuse settings that cannot work, with a message naming the setting."""

from __future__ import annotations

from rtc_agent.config.networks import parse_networks, parse_proxy_header
from rtc_agent.config.replicas import validate_replicas
from rtc_agent.config.settings import LLM_BATCH_INT8_MODES, LLM_PRECISIONS, Settings, SettingsError


def validate(settings: Settings) -> None:
    """Reject settings that cannot work, with a message naming the setting."""
    if not 0 < settings.port < 65536:
        raise SettingsError(f"port must be 1-65535, got {settings.port}")
    if settings.max_sessions < 1:
        raise SettingsError("max_sessions must be at least 1")
    if not 1.0 <= settings.capacity_safety <= 10.0:
        raise SettingsError("capacity_safety must be 1-10")
    if not 3 <= settings.capacity_running_window <= 1000:
        raise SettingsError("capacity_running_window must be 3-1000")
    if not 0.001 <= settings.capacity_running_recovery <= 1.0:
        raise SettingsError("capacity_running_recovery must be 0.001-1")
    for entry in (p.strip() for e in settings.capacity_sessions for p in str(e).split(",")):
        name, sep, count = entry.partition("=")
        if entry and (not sep or name.strip() not in ("captions", "interpret", "agent", "call")
                      or not count.strip().isdigit() or int(count) < 1):
            raise SettingsError(f"capacity_sessions: {entry!r} is not APP=N (APP: captions, interpret, agent or "
                                "call; N at least 1)")
    if not 2 <= settings.max_room_participants <= 16 or settings.room_transcripts_kept < 0:
        raise SettingsError("max_room_participants must be 2-16 and room_transcripts_kept at least 0")
    if not 0 <= settings.room_max_pairs <= 256 or not 1 <= settings.room_mt_backlog <= 256 \
            or not 0 <= settings.room_replay_lines <= 500:
        raise SettingsError("room_max_pairs must be 0-256, room_mt_backlog 1-256 and room_replay_lines 0-500")
    if settings.ice_transport_policy not in ("all", "relay"):
        raise SettingsError("ice_transport_policy must be 'all' or 'relay'")
    if not 60 <= settings.turn_ttl_s <= 86400:
        raise SettingsError(f"turn_ttl_s must be 60-86400 seconds, got {settings.turn_ttl_s}")
    if settings.sfu_url and not settings.sfu_url.lower().startswith(("ws://", "wss://", "http://", "https://")):
        raise SettingsError("sfu_url must be a Janus API URL (ws://, wss://, http:// or https://) or empty")
    if settings.sfu_public_url and not settings.sfu_public_url.lower().startswith(("ws://", "wss://")):
        raise SettingsError("sfu_public_url must be a Janus WebSocket API URL (ws:// or wss://): the pages speak no "
                            "other")
    if settings.sfu_url.lower().startswith(("http://", "https://")) and not settings.sfu_public_url:
        raise SettingsError("an HTTP sfu_url needs sfu_public_url: the Janus WebSocket API URL browsers use")
    if not 0 <= settings.sfu_max_listeners <= 10000 or not 1 <= settings.sfu_max_speakers <= 64:
        raise SettingsError("sfu_max_listeners must be 0-10000 and sfu_max_speakers 1-64")
    if not 1 <= settings.sfu_request_timeout_s <= 120 or not 31 <= settings.sfu_poll_timeout_s <= 600:
        raise SettingsError("sfu_request_timeout_s must be 1-120 and sfu_poll_timeout_s 31-600 (above Janus's 30 s "
                            "long poll)")
    if not 0 <= settings.sfu_reconnect_attempts <= 100 or not 0.1 <= settings.sfu_reconnect_delay_s <= 60 \
            or not settings.sfu_reconnect_delay_s <= settings.sfu_reconnect_max_delay_s <= 300:
        raise SettingsError("sfu_reconnect_attempts must be 0-100, sfu_reconnect_delay_s 0.1-60 and "
                            "sfu_reconnect_max_delay_s from sfu_reconnect_delay_s to 300")
    if not 0 <= settings.audio_jitter_frames <= 4:
        raise SettingsError("audio_jitter_frames must be 0-4")
    if settings.video_fps <= 0 or settings.video_max_edge < 16:
        raise SettingsError("video_fps must be > 0 and video_max_edge >= 16")
    if settings.heartbeat_timeout_s <= 0:
        raise SettingsError("heartbeat_timeout_s must be > 0")
    if not 0 <= settings.captions_context_s <= 20 or not 100 <= settings.captions_final_budget_ms <= 10_000:
        raise SettingsError("captions_context_s must be 0-20 and captions_final_budget_ms 100-10000")
    if not 0 <= settings.captions_split_min_s <= 30:
        raise SettingsError("captions_split_min_s must be 0-30 (0: never split at pauses)")
    if not 0 <= settings.captions_final_beam <= 10:
        raise SettingsError("captions_final_beam must be 0-10 (0: derived from the measured speed, 1: greedy)")
    if settings.captions_partial_interval_ms != 0 and not 100 <= settings.captions_partial_interval_ms <= 10_000:
        raise SettingsError("captions_partial_interval_ms must be 0 (derived) or 100-10000")
    if not 400 <= settings.captions_max_partial_interval_ms <= 10_000:
        raise SettingsError("captions_max_partial_interval_ms must be 400-10000")
    if settings.connect_timeout_s <= 0 or settings.connect_grace_s < 0 or settings.shutdown_timeout_s <= 0 \
            or settings.final_drain_s < 0:
        raise SettingsError("connect_timeout_s and shutdown_timeout_s must be > 0; connect_grace_s and "
                            "final_drain_s >= 0")
    if settings.max_pending_sessions_per_client < 1 or settings.max_candidates_per_patch < 1:
        raise SettingsError("max_pending_sessions_per_client and max_candidates_per_patch must be at least 1")
    if settings.json_max_depth < 2 or settings.json_max_number_chars < 16:
        raise SettingsError("json_max_depth must be at least 2 and json_max_number_chars at least 16")
    if settings.asr_device not in ("cpu", "cuda", "auto"):
        raise SettingsError("asr_device must be cpu, cuda or auto")
    if not 0.0 < settings.vad_threshold < 1.0:
        raise SettingsError("vad_threshold must be between 0 and 1")
    if not 0 <= settings.agent_barge_in_min_ms <= 2000 or not -90 <= settings.agent_barge_in_floor_dbfs <= 0 \
            or not 0 <= settings.agent_barge_in_margin_db <= 40:
        raise SettingsError("agent_barge_in_min_ms must be 0-2000, agent_barge_in_floor_dbfs -90 to 0 and "
                            "agent_barge_in_margin_db 0-40")
    if not isinstance(settings.llm_row_cache_mb, int) or not 0 <= settings.llm_row_cache_mb <= 4096:
        raise SettingsError("llm_row_cache_mb must be 0-4096")
    if settings.llm_precision not in LLM_PRECISIONS:
        raise SettingsError(f"llm_precision must be one of {', '.join(LLM_PRECISIONS)}")
    if settings.llm_batch_int8 not in LLM_BATCH_INT8_MODES:
        raise SettingsError(f"llm_batch_int8 must be one of {', '.join(LLM_BATCH_INT8_MODES)}")
    short = [k for k in settings.api_keys if len(k) < 16]
    if short:
        raise SettingsError("api_keys must be at least 16 characters each")
    for name in ("client_token_ttl_s", "room_link_ttl_s", "page_session_ttl_s", "max_client_tokens",
                 "rate_sessions_per_minute", "rate_uploads_per_minute", "rate_tokens_per_minute",
                 "rate_logins_per_minute"):
        if getattr(settings, name) < 1:
            raise SettingsError(f"{name} must be at least 1")
    for name in ("st_max_upload_seconds", "upload_read_timeout_s", "upload_deadline_s", "max_instructions_chars",
                 "max_tools", "max_tool_schema_bytes", "max_text_field_chars"):
        if getattr(settings, name) <= 0:
            raise SettingsError(f"{name} must be > 0")
    for name in ("max_pending_sessions_per_network", "max_pending_sessions", "max_tokens_per_credential",
                 "room_transcript_ttl_s", "channel_bytes_per_s"):
        if getattr(settings, name) < 1:
            raise SettingsError(f"{name} must be at least 1")
    if settings.room_rejoin_grace_s < 0:
        raise SettingsError("room_rejoin_grace_s must be >= 0")
    if not 0 <= settings.room_tile_grace_s <= 3600:
        raise SettingsError("room_tile_grace_s must be 0-3600 seconds")
    if settings.room_transcript_max_lines < 1 or settings.room_store_queue < 1:
        raise SettingsError("room_transcript_max_lines and room_store_queue must be at least 1")
    if not 0 <= settings.shutdown_drain_s <= 3600:
        raise SettingsError("shutdown_drain_s must be 0-3600 seconds")
    for name in ("request_read_timeout_s", "channel_messages_per_s", "channel_burst_s", "channel_overload_close_s"):
        if getattr(settings, name) <= 0:
            raise SettingsError(f"{name} must be > 0")
    if not settings.state_url.startswith(("memory:", "sqlite:", "redis://", "rediss://", "unix://")):
        raise SettingsError("state_url must be memory:, sqlite:, sqlite:///PATH, redis://HOST:PORT[/DB] or "
                            "rediss://... (got a URL of another kind)")
    if not 0.1 <= settings.state_sweep_s <= 86400:
        raise SettingsError("state_sweep_s must be 0.1-86400 seconds")
    if not 1024 <= settings.state_max_value_bytes <= 64 * 1024 * 1024 or settings.state_max_list_items < 1:
        raise SettingsError("state_max_value_bytes must be 1024-67108864 and state_max_list_items at least 1")
    if settings.mt_engine.strip().lower() not in ("auto", "embedded", "openai", "ctranslate2", "none"):
        raise SettingsError("mt_engine must be auto, embedded, openai, ctranslate2 or none")
    if not 1 <= settings.mt_max_chars <= 100_000 or not 1 <= settings.mt_timeout_s <= 600 \
            or not 1 <= settings.mt_beam <= 16:
        raise SettingsError("mt_max_chars must be 1-100000, mt_timeout_s 1-600 seconds and mt_beam 1-16")
    if not isinstance(settings.mt_max_batch, int) or not 1 <= settings.mt_max_batch <= 16:
        raise SettingsError("mt_max_batch must be 1-16")
    if not isinstance(settings.mt_prime_words, int) or not 0 <= settings.mt_prime_words <= 64:
        raise SettingsError("mt_prime_words must be 0-64")
    if not isinstance(settings.blas_threads, int) or not 0 <= settings.blas_threads <= 64:
        raise SettingsError("blas_threads must be 0-64")
    if settings.tts_multilingual not in ("auto", "kokoro", "off") or not 0 <= settings.kokoro_threads <= 64 \
            or not 0 <= settings.tts_neural_voices <= 64:
        raise SettingsError("tts_multilingual must be auto, kokoro or off, and kokoro_threads and "
                            "tts_neural_voices 0-64")
    for name in ("tts_voices", "kokoro_voices"):  # the voice names are checked by engines/tts/languages.py
        for entry in (p.strip() for e in getattr(settings, name) for p in str(e).split(",")):
            code, sep, voice = entry.partition("=")
            if entry and (not sep or not code.strip().isalpha() or not 2 <= len(code.strip()) <= 3
                          or not voice.strip()):
                raise SettingsError(f"{name}: {entry!r} is not LANG=VOICE (LANG an ISO 639-1 code such as es)")
    if settings.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise SettingsError("log_level must be debug, info, warning or error")
    validate_proxies(settings)
    validate_replicas(settings)  # node_url, node_secret, room leases (rtc_agent.config.replicas)


def validate_proxies(settings: Settings) -> None:
    """``trusted_proxies``: IPs or CIDRs (no host bits, never ``/0``, which would let any client name its own
    address); ``trusted_proxy_header``: ``x-forwarded-for`` or ``forwarded`` (:mod:`rtc_agent.config.networks`)."""
    parse_networks(settings.trusted_proxies)
    parse_proxy_header(settings.trusted_proxy_header)
