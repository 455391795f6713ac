"""The SFU bench's summaries of a listener's events (rtc_agent/bench/call_sfu.py): where each translation's lag went,
what the listener's interpreter voice did, and when the listener heard it."""

from __future__ import annotations

import pytest

from rtc_agent.bench.call_sfu import compare_with_calls, lag_parts, spoken_lags
from rtc_agent.bench.common import speech_summary


def test_speech_summary_counts_what_the_voice_spoke_skipped_and_dropped() -> None:
    events = [
        {"type": "caption.translation", "lag_ms": 2000, "audio_end_ms": 3000},
        {"type": "translation.speech.started", "utterance_id": "u1", "engine": "tts-kokoro"},
        {"type": "translation.speech.done", "utterance_id": "u1"},
        {"type": "caption.translation", "lag_ms": 2100, "audio_end_ms": 7000},
        {"type": "translation.speech.catchup", "action": "speed", "lag_ms": 3500},
        {"type": "translation.speech.catchup", "action": "skip", "lag_ms": 7200},
        {"type": "translation.speech.catchup", "action": "drop", "lag_ms": 9100},
        {"type": "translation.speech.catchup", "action": "fallback", "lag_ms": 6500},
        {"type": "translation.speech.started", "utterance_id": "u2", "engine": "tts-espeak"},
        {"type": "translation.speech.done", "utterance_id": "u2", "cleared": True},
    ]
    assert speech_summary(events) == {"translations": 2, "started": 2, "done": 1, "skipped": 1, "fallback": 1,
                                      "dropped": 1, "max_catchup_lag_s": 9.1,
                                      "engines": {"tts-kokoro": 1, "tts-espeak": 1}}
    assert speech_summary([])["max_catchup_lag_s"] == 0


def test_lag_parts_split_each_translation_into_caption_wait_and_mt() -> None:
    events = [
        {"type": "caption.final", "audio_end_ms": 3000, "behind_ms": 450},
        {"type": "translation.chunk", "audio_end_ms": 3000, "latency_ms": 1200.4},
        {"type": "caption.translation", "audio_end_ms": 3000, "lag_ms": 1900},
        {"type": "caption.translation", "audio_end_ms": 9000, "lag_ms": 1000},  # no final or chunk: left out
    ]
    assert lag_parts(events) == [{"lag_ms": 1900, "caption_ms": 450, "mt_ms": 1200, "wait_ms": 250}]


def test_spoken_lags_time_each_spoken_text_from_the_end_of_its_source_speech() -> None:
    events = [
        {"type": "caption.translation", "segment_id": "s1", "text": "Hola.", "lag_ms": 1500},
        {"type": "translation.speech.started", "segment_id": "s1", "text": "Hola.", "starts_in_ms": 0},
        {"type": "caption.translation", "segment_id": "s2", "text": "Uno.", "lag_ms": 2000},
        {"type": "caption.translation", "segment_id": "s2", "text": "Dos.", "lag_ms": 2500},
        {"type": "translation.speech.started", "segment_id": "s2", "text": "Uno.", "starts_in_ms": 800},
        {"type": "translation.speech.started", "segment_id": "s3", "text": "Tres.", "starts_in_ms": 0},  # left out
    ]
    times = [10.0, 10.5, 20.0, 21.0, 22.0, 30.0]
    # s1 ended at 8.5 s, its audio starts at 10.5 s and is heard at 10.58 s; s2's "Uno." ended at 18 s (its own
    # piece, not the later "Dos."), starts at 22.8 s behind the speech queued ahead, with no pause to hear
    spoken = spoken_lags(events, times, onsets=[10.58, 15.0, 25.0])
    assert spoken == [{"lag_ms": 2000, "heard_ms": 80}, {"lag_ms": 4800, "heard_ms": None}]
    assert spoken_lags(events, times, onsets=[]) == [{"lag_ms": 2000, "heard_ms": None},
                                                     {"lag_ms": 4800, "heard_ms": None}]


def _call(lags_ms: list[int]) -> dict:
    ordered = sorted(lags_ms)
    return {"interpretation_lag_ms": {"p90": float(ordered[-1]) if ordered else None, "count": len(ordered)},
            "lags_ms": lags_ms}


def test_the_rooms_lag_is_compared_with_2_person_calls_in_each_of_its_languages() -> None:
    room = {"interpretation_lag_ms": {"p50": 2000.0, "p90": 2700.0, "count": 240},
            "by_language": {"es": {"lag_ms": {"p90": 2200.0}}, "de": {"lag_ms": {"p90": 2700.0}}}}
    # Spanish translations are shorter than German ones: each language is compared with its own call
    calls = {"es": _call([1000, 1500, 1800]), "de": _call([1600, 2000, 2250])}
    out = compare_with_calls(room, calls)
    assert out["lag_p90_vs_call_by_language"] == {"es": round(2200 / 1800, 3), "de": 1.2}
    assert out["lag_p90_vs_call"] == 1.5  # the first language's call alone
    assert out["lag_p90_vs_calls"] == 1.2  # the calls' six lags pooled: p90 is 2250 ms
    assert compare_with_calls(room, {}) == {"lag_p90_vs_calls": None, "lag_p90_vs_call_by_language": {},
                                            "lag_p90_vs_call": None}  # --no-sfu-call
    nothing = compare_with_calls(room, {"es": _call([])})
    assert nothing["lag_p90_vs_calls"] is None and nothing["lag_p90_vs_call_by_language"] == {"es": None}


@pytest.mark.real_model  # (Silero VAD finds the sentences)
def test_the_speaker_says_the_sentences_a_second_apart() -> None:
    """The speaker's audio (espeak-ng here; ``--sfu-voice human`` takes recorded prompts the same way): a second of
    silence before, between and after the sentences, 48 kHz."""
    import numpy as np

    from rtc_agent.bench.audio import load_audio_array, speech_segments_ms
    from rtc_agent.bench.call_sfu import speaker_speech

    pcm = speaker_speech("espeak", 2)
    assert pcm.dtype == np.int16 and not pcm[:48000].any() and not pcm[-48000:].any()
    segments = speech_segments_ms(load_audio_array(pcm), 700)
    assert len(segments) == 2 and segments[1][0] - segments[0][1] >= 800, segments
