"""Long utterances split at a pause (TranscriberConfig.split_min_s): the final decode made at the pause becomes
the final of the part before it, so the final at the utterance's end decodes only the rest. Scripted recognizer;
the real path is in test_captions_real.py."""

from __future__ import annotations

import asyncio

import pytest

from rtc_agent.apps.captions.speech_segmenter import SpeechEvent
from rtc_agent.apps.captions.transcriber_config import transcriber_config
from rtc_agent.config import Settings, SettingsError, load_settings
from tests.test_captions_policy import Harness, ScriptedRecognizer, hyp

TAIL_MS = 150  # TranscriberConfig.tail_ms
# The scripted decodes take no time: with a budget of 0 no audio "fits" it, so split_min_s alone decides.


async def _utterance_with_a_pause(h: Harness, *, before_ms: int, quiet_ms: int, after_ms: int,
                                  resume_after_ms: int | None = None) -> tuple[int, int]:
    """Speech from 0 for ``before_ms``, a pause (``quiet_ms`` of audio arrives before the VAD reports speech
    again, ``resume_after_ms`` after the pause: ``quiet_ms`` unless given), speech again for ``after_ms``, then
    its end; returns (pause, end) in ms."""
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(before_ms)
    pause = h.ms
    h.transcriber.on_speech(SpeechEvent("pause", pause), h.ms)
    await h.speak(quiet_ms)
    h.transcriber.on_speech(SpeechEvent("resume", pause + (quiet_ms if resume_after_ms is None else resume_after_ms)),
                            h.ms)
    await h.speak(after_ms)
    end = h.ms
    h.transcriber.on_speech(SpeechEvent("pause", end), h.ms)
    await h.speak(300)
    h.transcriber.on_speech(SpeechEvent("end", end), h.ms)
    await h.settle()
    return pause, end


async def test_a_long_utterance_gets_the_final_of_its_first_part_at_a_pause():
    rec = ScriptedRecognizer([hyp("the first")] * 2, finals=[hyp("The first part."), hyp("And the rest.")])
    h = Harness(rec, decode_interval_ms=10_000, split_min_s=2.0, final_budget_ms=0)
    pause, end = await _utterance_with_a_pause(h, before_ms=3000, quiet_ms=200, after_ms=1000)
    finals = h.of("caption.final")
    assert [f.text for f in finals] == ["The first part.", "And the rest."]
    assert finals[0].audio_end_ms == pause and finals[1].audio_start_ms == pause + TAIL_MS
    assert finals[1].audio_end_ms == end and finals[0].segment_id != finals[1].segment_id
    # the final at the end decoded only the audio after the pause's decoded tail, not the whole utterance
    assert len(rec.final_requests) == 2
    assert len(rec.final_requests[1].audio) == (end + TAIL_MS - (pause + TAIL_MS)) * 16
    assert h.transcriber.stats()["splits"] == 1
    # partials after the split start again: nothing of the first part is committed in the second segment
    later = [p for p in h.of("caption.partial") if p.segment_id == finals[1].segment_id]
    assert all("first" not in p.committed for p in later)


async def test_the_decode_still_running_at_the_resume_splits_when_it_is_back():
    """The usual case on a real engine: the pause's final decode takes longer than the pause."""
    rec = ScriptedRecognizer([hyp("the first")] * 2, finals=[hyp("The first part."), hyp("And the rest.")],
                             delay=0.3)
    h = Harness(rec, decode_interval_ms=10_000, split_min_s=2.0, final_budget_ms=0)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(3000)
    pause = h.ms
    h.transcriber.on_speech(SpeechEvent("pause", pause), h.ms)
    h.audio(200)
    h.transcriber.poll(h.ms)
    await asyncio.sleep(0.05)
    assert len(rec.final_requests) == 1 and not all(t.done() for t in h.tasks)  # in flight
    h.transcriber.on_speech(SpeechEvent("resume", pause + 200), h.ms)
    await h.settle()
    assert [f.text for f in h.of("caption.final")] == ["The first part."]
    assert h.of("caption.final")[0].audio_end_ms == pause


async def test_no_split_for_a_short_part_a_short_quiet_or_an_unusable_decode():
    # the part before the pause is shorter than split_min_s: one final for the whole utterance
    rec = ScriptedRecognizer([hyp("one")] * 3, finals=[hyp("One."), hyp("One, two.")])
    h = Harness(rec, decode_interval_ms=10_000, split_min_s=4.0, final_budget_ms=0)
    await _utterance_with_a_pause(h, before_ms=3000, quiet_ms=200, after_ms=500)
    assert [f.text for f in h.of("caption.final")] == ["One, two."]
    # the quiet ended before the decoded tail did (the VAD reports it late): the decode heard the next word's start
    rec = ScriptedRecognizer([hyp("one")] * 3, finals=[hyp("One."), hyp("One, two.")])
    h = Harness(rec, decode_interval_ms=10_000, split_min_s=2.0, final_budget_ms=0)
    await _utterance_with_a_pause(h, before_ms=3000, quiet_ms=200, resume_after_ms=TAIL_MS - 50, after_ms=500)
    assert len(rec.final_requests) == 2  # the pause was decoded, but not split at
    assert [f.text for f in h.of("caption.final")] == ["One, two."]
    # the pause's decode heard nothing usable (silence guard): no split on it
    silent = hyp("Thank you.", no_speech_prob=0.9, avg_logprob=-2.0)
    rec = ScriptedRecognizer([], finals=[silent, hyp("One, two.")])
    h = Harness(rec, decode_interval_ms=10_000, split_min_s=2.0, final_budget_ms=0)
    await _utterance_with_a_pause(h, before_ms=3000, quiet_ms=200, after_ms=500)
    assert [f.text for f in h.of("caption.final")] == ["One, two."]
    # split_min_s 0: never
    rec = ScriptedRecognizer([hyp("one")] * 3, finals=[hyp("One."), hyp("One, two.")])
    h = Harness(rec, decode_interval_ms=10_000, split_min_s=0, final_budget_ms=0)
    await _utterance_with_a_pause(h, before_ms=3000, quiet_ms=200, after_ms=500)
    assert [f.text for f in h.of("caption.final")] == ["One, two."]


async def test_the_split_length_follows_the_measured_final_speed():
    """A part is split off once it is longer than the final budget decodes at the speed recent final decodes
    ran (``EarlierFinals.rate``, the median of the recent ones: here the mean of one at ``rate`` and the pause's own
    decode, instant): a fast machine (0.05 s per
    second of audio, 0.025 with it: 18 s fit in 450 ms) keeps a 3 s part whole, a slow one (0.5 s per second,
    0.25 with it: 1.8 s fit) splits it."""
    for rate, splits in ((0.05, 0), (0.5, 1)):
        rec = ScriptedRecognizer([hyp("one")] * 3, finals=[hyp("One."), hyp("Two.")])
        h = Harness(rec, decode_interval_ms=10_000, split_min_s=1.0, final_budget_ms=450)
        h.transcriber.earlier.decoded(wall_s=rate, audio_s=1.0)
        assert h.transcriber.earlier.fits_s() == 0.45 / rate
        await _utterance_with_a_pause(h, before_ms=3000, quiet_ms=200, after_ms=500)
        assert h.transcriber.stats()["splits"] == splits, rate
        assert len(h.of("caption.final")) == 1 + splits


def test_the_split_length_is_a_setting(tmp_path):
    assert transcriber_config(Settings(), "en").split_min_s == Settings().captions_split_min_s == 4.0
    settings = Settings()
    settings.captions_split_min_s = 0.0
    assert transcriber_config(settings, "en").split_min_s == 0.0
    config = tmp_path / "bad.toml"
    config.write_text("captions_split_min_s = 90\n")
    with pytest.raises(SettingsError, match="captions_split_min_s must be 0-30"):
        load_settings(config, env={})
