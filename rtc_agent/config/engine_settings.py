"""``EngineSettings``: the settings of the engines (which backend of each kind, its URL, model, threads, precision,
budgets), the page options and the engine limits; :class:`~rtc_agent.config.settings.Settings` inherits them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rtc_agent.config.options import PROJECT_ROOT
from rtc_agent.config.options import opt as _opt


@dataclass
class EngineSettings:
    """The engine, page and limit fields of :class:`~rtc_agent.config.settings.Settings` (the same contract: field
    names are TOML keys, flags and environment variables)."""

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
    asr_model: str = _opt("", "ASR model: empty = the packaged Whisper base; tiny.en = the packaged Whisper "
                              "tiny.en (English only, about half base's decode time: for English captions where "
                              "base is too slow; accuracy in the README); a CTranslate2 model folder; or a "
                              "faster-whisper name (large-v3, ...) already in the Hugging Face cache.", "engines")
    asr_device: str = _opt("cpu", "Device of the embedded ASR engine: cpu, cuda or auto.", "engines")
    asr_compute_type: str = _opt("default", "CTranslate2 compute type (int8, float16, int8_float16, ...); default "
                                            "= int8 on CPU, float16 on CUDA.", "engines")
    asr_threads: int = _opt(0, "CPU threads of each embedded ASR decode; two run at once (0 = auto: half the "
                                  "cores each, at least 1).", "engines")
    blas_threads: int = _opt(1, "Threads of numpy's BLAS library (OpenBLAS) in the server; its spinning helper "
                                "threads took the cores the engines need (0 = the library's default: one per "
                                "core).", "engines")
    asr_language: str = _opt("auto", "Spoken language for captions: a Whisper code such as en, or auto.", "engines")
    captions_context_s: float = _opt(
        16.0, "Most seconds of a session's earlier speech the final decode of a caption also hears (more: closer to "
              "offline accuracy, slower finals; 0: none).", "engines")
    captions_final_budget_ms: int = _opt(
        450, "Time a caption's final decode may take: the earlier speech it hears is cut to fit, from how fast "
             "recent final decodes ran (under load it hears less, so sessions stay real time).", "engines")
    captions_split_min_s: float = _opt(
        4.0, "A caption utterance at least this long (seconds) that pauses briefly and goes on gets its final for "
             "the part before the pause (decoded at the pause), once that part is also longer than the final budget "
             "can decode, so the final at its end decodes only the rest (0: never split at pauses).", "engines")
    captions_force_context: bool = _opt(
        False, "A caption's final decode (embedded Whisper) gets the earlier finals' text forced over their audio, "
               "and hears the last second of an earlier final the budget cuts into: more context on a slow CPU (an "
               "AVX2 one without AVX-512 VNNI), but an earlier final's wrong words carry into the next ones.",
        "engines")
    captions_final_beam: int = _opt(
        0, "Beam of a caption's final decode (1: greedy; 1-10). 0: derived from this machine's measured speed (beam "
           "5 where the beam-5 final of a 3 s utterance fits captions_final_budget_ms, smaller down to greedy where "
           "it does not and a smaller beam is faster; 5 until measured).", "engines")
    captions_partial_interval_ms: int = _opt(
        0, "Audio between a caption's partial decodes, in ms (100-10000). 0: derived from the measured speed and the "
           "sessions running (400 where partials take a small share of the machine, longer on a slow or busy one, "
           "up to captions_max_partial_interval_ms; 400 until measured).", "engines")
    captions_max_partial_interval_ms: int = _opt(
        1200, "The longest derived partial interval, in ms (400-10000): how rarely a slow or busy machine updates a "
              "caption while the speaker talks, so its finals stay on time.", "engines")
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
    llm_batch_int8: str = _opt("auto", "Embedded LLM: decode steps of 2-8 sequences at once (a room's languages "
                                       "translated together) through int8 x int8 products, so three cost about "
                                       "what one does: auto (where torch runs its AVX2 or AVX-512 kernels), on "
                                       "or off (the int4 kernel, whose cost grows with the rows).", "engines")
    llm_adaptive_threads: bool = _opt(True, "Embedded LLM: run each step on all its threads only while the rest of "
                                            "the machine leaves the cores idle, else on one (a step split across "
                                            "shared cores waits for the slowest part: up to 6x slower).", "engines")
    llm_row_cache_mb: int = _opt(128, "Embedded LLM: memory for the keys and values of recent batch rows (0-4096 "
                                      "MB): each interpreted speaker and language keeps its translation context "
                                      "there (a few MB), so its next final computes only the new tokens; too "
                                      "small for the rooms running at once and they evict each other's; 0: "
                                      "none.", "limits")
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
    mt_max_batch: int = _opt(4, "Most translations the embedded text translator decodes together (1-16): "
                                "requests waiting at once, e.g. one caption final into each listener language, "
                                "share one forward pass per token (1 = one at a time).", "limits")
    mt_prime_words: int = _opt(4, "While a sentence is being said, each time its captions have committed this many "
                                  "more words the embedded text translator computes the translation prompt up to "
                                  "them, so the final's translation starts sooner (0-64; 0 = only after the final).",
                               "limits")
    tts_engine: str = _opt("embedded", "Text-to-speech engine: embedded or openai.", "engines")
    tts_url: str = _opt("", "Base URL of an OpenAI-compatible /v1/audio/speech server.", "engines")
    tts_model: str = _opt("", "TTS model: empty = the packaged Piper joe voice; a Piper .onnx file; or the "
                              "remote server's model name.", "engines")
    tts_voice: str = _opt("alloy", "Voice name for the remote TTS server.", "engines")
    tts_api_key: str = _opt("", "API key for the remote TTS server.", "engines", secret=True)
    tts_speed: float = _opt(1.0, "Speaking rate (1.0 = the voice's own).", "engines")
    tts_nice: int = _opt(10, "How much lower the CPU priority of the embedded voices' threads (Piper, Kokoro) is "
                             "than the server's, 0-19: speech synthesized ahead of the listener takes the cores "
                             "that recognition and translation leave idle (0 = the same priority).", "engines")
    tts_catchup_voice: str = _opt("espeak", "Voice of an interpretation text whose neural voice (Kokoro) fell more "
                                            "than twice the max lag behind: espeak (espeak-ng: robotic, costs "
                                            "almost no CPU, every text is spoken) or off (such text is skipped and "
                                            "stays on screen).", "engines")
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
    tts_neural_voices: int = _opt(0, "Interpretation languages the server speaks with the neural voice (Kokoro) at "
                                     "once, over all rooms; a language past them is spoken by the espeak-ng voice "
                                     "from its first text until the room's interpretation into it stops (0 = auto: "
                                     "one per two CPU cores, at least 1; 64 = every language).", "engines")
    kokoro_weight_bits: int = _opt(0, "Weights of the Kokoro voice: 8 (the packaged int8 model), 7 (a copy made "
                                      "once, for x86 CPUs without VNNI, whose 8-bit products saturate and garble "
                                      "the voice), or 0 = auto: 7 on such CPUs, else 8.", "engines")
    vlm_engine: str = _opt("embedded", "Vision engine: embedded (scene describer), transformers, moss, or "
                                       "sglang/openai (remote).", "engines")
    vlm_url: str = _opt("", "URL of a remote realtime vision service.", "engines")
    vlm_model: str = _opt("", "Vision model name or path.", "engines")
