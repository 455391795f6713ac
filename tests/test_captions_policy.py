"""The captions policy with scripted recognizers: segmentation, LocalAgreement commits, finals, trimming and the
silence guard. The real-model path is in test_captions_real.py."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from rtc_agent.apps.captions.local_agreement import LocalAgreement, common_prefix, strip_committed
from rtc_agent.apps.captions.speech_segmenter import SpeechEvent, SpeechSegmenter
from rtc_agent.apps.captions.transcriber import StreamingTranscriber
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.engines.asr.base import Segment, TranscribeRequest, Transcript
from rtc_agent.errors import AtCapacity


def feed(segmenter: SpeechSegmenter, probs: list[float], window_ms: int = 32) -> list[SpeechEvent]:
    events = []
    for i, p in enumerate(probs):
        events += segmenter.feed(p, i * window_ms, (i + 1) * window_ms)
    return events


def test_segmenter_needs_minimum_speech_and_silence():
    seg = SpeechSegmenter(threshold=0.5, min_speech_ms=96, min_silence_ms=128)
    assert feed(seg, [0.9, 0.9, 0.1, 0.9]) == []  # two loud windows (64 ms) are a cough, not speech
    seg = SpeechSegmenter(threshold=0.5, min_speech_ms=96, min_silence_ms=128)
    events = feed(seg, [0.1, 0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.9, 0.8, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert events == [SpeechEvent("start", 32), SpeechEvent("pause", 160), SpeechEvent("resume", 224),
                      SpeechEvent("pause", 288), SpeechEvent("end", 288)]
    assert not seg.in_speech


def test_segmenter_hysteresis_and_flush():
    seg = SpeechSegmenter(threshold=0.5, min_speech_ms=32, min_silence_ms=64)
    events = feed(seg, [0.9, 0.45, 0.45, 0.45, 0.45])  # between the thresholds: still speech
    assert [e.kind for e in events] == ["start"]
    assert seg.flush(500) == [SpeechEvent("end", 500)]
    assert seg.flush(600) == []


def test_local_agreement_commits_what_two_hypotheses_share():
    la = LocalAgreement()
    assert la.update(["the", "cat"]) == []
    assert la.update(["the", "cat", "sat", "on"]) == ["the", "cat"]
    assert la.tentative == ["sat", "on"]
    assert la.update(["Sat,", "on", "the", "mat"]) == ["Sat,", "on"]
    assert la.committed == ["the", "cat", "Sat,", "on"]
    assert la.update(["a", "rug"]) == []  # disagreement commits nothing and never changes committed words
    assert la.committed == ["the", "cat", "Sat,", "on"]
    assert common_prefix(["Hello,", "World"], ["hello", "world!"]) == 2
    assert strip_committed(["the", "cat", "sat"], ["The", "cat"]) == ["sat"]
    assert strip_committed(["a", "cat", "sat"], ["the", "cat"]) == ["sat"]


def test_word_runs_compare_normalized_words():
    from rtc_agent.words import contains_run, normalized

    assert normalized(["Hello,", "World!", "it's"]) == ["hello", "world", "it's"]
    assert contains_run(normalized(["We're", "just", "saying", "some", "words"]), ["just", "saying"])
    assert contains_run(["a", "b"], ["a", "b"]) and not contains_run(["a", "b"], ["b", "a"])
    assert not contains_run(["a"], ["a", "b"]) and not contains_run(["a"], [])


class ScriptedRecognizer:
    """Answers each partial decode (greedy) with the next transcript of ``script`` and each final decode (beam
    search) with the next of ``finals``; an empty answer when a script has run out (a final then falls back to
    what the partials showed). Records the requests."""

    def __init__(self, script: list[Transcript | Exception], delay: float = 0.0,
                 finals: list[Transcript | Exception] | None = None) -> None:
        self.script = list(script)
        self.final_script = list(finals or [])
        self.requests: list[TranscribeRequest] = []
        self.delay = delay

    @staticmethod
    def is_final(request: TranscribeRequest) -> bool:
        return (request.beam_size or 1) > 1

    @property
    def partial_requests(self) -> list[TranscribeRequest]:
        return [r for r in self.requests if not self.is_final(r)]

    @property
    def final_requests(self) -> list[TranscribeRequest]:
        return [r for r in self.requests if self.is_final(r)]

    async def __call__(self, request: TranscribeRequest) -> Transcript:
        self.requests.append(request)
        await asyncio.sleep(self.delay)
        source = self.final_script if self.is_final(request) else self.script
        item = source.pop(0) if source else Transcript(text="", prefix_applied=True, language=request.language)
        if isinstance(item, Exception):
            raise item
        return item


def hyp(text: str, segments: list[tuple[float, float, str]] | None = None, **kw) -> Transcript:
    segs = [Segment(a, b, t) for a, b, t in segments] if segments else [Segment(0, 1, text)]
    return Transcript(text=text, segments=segs, prefix_applied=True, language="en", language_prob=1.0, **kw)


class Harness:
    def __init__(self, recognizer: ScriptedRecognizer, **config) -> None:
        self.events: list = []
        self.tasks: list[asyncio.Task] = []
        self.transcriber = StreamingTranscriber(
            recognizer, self.events.append,
            lambda coro, name: self.tasks.append(asyncio.get_running_loop().create_task(coro)) or self.tasks[-1],
            TranscriberConfig(**{"language": "en", "min_commit_ms": 0, "final_beam_size": 5, "prompt_chars": 300,
                                 "context_s": 0, **config}),
        )
        self.ms = 0

    def audio(self, ms: int) -> None:
        for _ in range(ms // 20):
            self.transcriber.push_audio(np.full(320, 0.1, dtype=np.float32), self.ms)
            self.ms += 20

    async def settle(self) -> None:
        while any(not t.done() for t in self.tasks):
            await asyncio.gather(*self.tasks)

    async def speak(self, ms: int, step_ms: int = 100) -> None:
        for _ in range(ms // step_ms):
            self.audio(step_ms)
            self.transcriber.poll(self.ms)
            await self.settle()

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.type == kind]


async def test_partials_commit_agreed_words_and_final_adds_the_tail():
    rec = ScriptedRecognizer([hyp("hello"), hyp("hello there"), hyp("there general"), hyp("general kenobi"),
                              hyp("kenobi")])
    h = Harness(rec, decode_interval_ms=500)
    h.audio(300)
    h.transcriber.on_speech(SpeechEvent("start", 100), h.ms)  # the first decode starts at once
    await h.speak(1500)
    partials = h.of("caption.partial")
    assert [p.committed for p in partials] == ["", "hello", "hello there", "hello there general"]
    assert [p.tentative for p in partials] == ["hello", "there", "general", "kenobi"]
    # committed text only ever grows
    for a, b in itertools.pairwise(partials):
        assert b.committed.startswith(a.committed)
    # the forced prefix is what is committed
    assert [r.prefix for r in rec.requests] == ["", "", "hello", "hello there"]
    assert all(p.segment_id == partials[0].segment_id for p in partials)
    h.transcriber.on_speech(SpeechEvent("pause", h.ms), h.ms)
    await h.settle()
    h.audio(300)
    h.transcriber.on_speech(SpeechEvent("end", h.ms - 300), h.ms)
    await h.settle()
    finals = h.of("caption.final")
    assert len(finals) == 1 and finals[0].text == "hello there general kenobi"
    assert finals[0].audio_start_ms == 100 and finals[0].audio_end_ms == h.ms - 300
    # a looping partial is cut (the next one replaces it), a looping final decoded again in a longer window
    assert all(r.cut_loops for r in rec.partial_requests) and not any(r.cut_loops for r in rec.final_requests)
    assert h.of("input_audio_buffer.speech_started")[0].audio_start_ms == 100
    assert h.of("input_audio_buffer.speech_stopped")[0].audio_end_ms == h.ms - 300


async def test_final_reuses_a_decode_that_covered_the_end():
    """The final decode (beam search, the whole utterance, no forced prefix) starts at the first quiet window
    once the tail has arrived, so the VAD's end finds it done."""
    rec = ScriptedRecognizer([hyp("one")], finals=[hyp("One, two, three.")])
    h = Harness(rec, decode_interval_ms=10_000)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(1000)
    assert len(rec.requests) == 1 and len(rec.requests[0].audio) == 300 * 16  # first decode at min_decode_ms
    pause = h.ms
    h.transcriber.on_speech(SpeechEvent("pause", pause), h.ms)
    await h.settle()
    assert len(rec.requests) == 1  # waits for the tail
    await h.speak(200)
    assert len(rec.final_requests) == 1
    final = rec.final_requests[0]
    assert final.prefix == "" and final.beam_size == 5 and len(final.audio) == (pause + 150) * 16
    h.transcriber.on_speech(SpeechEvent("end", pause), h.ms + 50)
    await h.settle()
    assert len(rec.requests) == 2  # no extra decode for the final
    assert [f.text for f in h.of("caption.final")] == ["One, two, three."]


async def test_a_final_does_not_wait_for_a_partial_in_flight():
    """A partial decode still running when the tail after the pause has arrived (a busy engine): the final decode
    starts beside it, marked urgent for the worker, and the late partial changes nothing."""
    rec = ScriptedRecognizer([hyp("one"), hyp("one two")], finals=[hyp("One, two, three.")], delay=0.5)
    h = Harness(rec, decode_interval_ms=400)
    h.audio(400)
    h.transcriber.on_speech(SpeechEvent("start", 100), h.ms)  # a partial decode starts (it takes 0.5 s)
    h.audio(300)
    pause = h.ms
    h.transcriber.on_speech(SpeechEvent("pause", pause), h.ms)
    h.audio(200)
    h.transcriber.poll(h.ms)
    await asyncio.sleep(0.05)
    assert [rec.is_final(r) for r in rec.requests] == [False, True]  # both in flight
    assert not all(t.done() for t in h.tasks)
    assert not rec.requests[0].urgent and rec.requests[1].urgent
    h.transcriber.on_speech(SpeechEvent("end", pause), h.ms)
    await h.settle()
    h.transcriber.poll(h.ms)
    assert [f.text for f in h.of("caption.final")] == ["One, two, three."]
    assert len(rec.requests) == 2


async def test_the_first_decode_starts_when_speech_is_confirmed():
    rec = ScriptedRecognizer([hyp("good"), hyp("good morning")])
    h = Harness(rec, decode_interval_ms=400)
    h.audio(400)  # the VAD confirms speech after its minimum duration; the pre-roll is in the buffer
    h.transcriber.on_speech(SpeechEvent("start", 200), h.ms)
    await h.settle()
    assert len(rec.requests) == 1 and h.of("caption.partial")[0].tentative == "good"
    await h.speak(300)
    assert len(rec.requests) == 1  # then one decode per interval
    await h.speak(100)
    assert len(rec.requests) == 2


async def test_an_utterance_starting_during_the_last_decode_of_the_previous_one_waits_for_it():
    rec = ScriptedRecognizer([hyp("alpha beta"), hyp("delta")], finals=[hyp("alpha beta gamma"), hyp("delta epsilon")],
                             delay=0.2)
    h = Harness(rec, decode_interval_ms=10_000)
    h.audio(400)
    h.transcriber.on_speech(SpeechEvent("start", 200), h.ms)
    await h.settle()
    h.audio(1000)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)  # the final decode of the first utterance
    h.audio(400)
    h.transcriber.on_speech(SpeechEvent("start", h.ms - 300), h.ms)  # while that decode still runs
    second_start = h.ms - 300
    assert len(h.of("caption.final")) == 0 and len(h.of("input_audio_buffer.speech_started")) == 1
    await h.settle()
    h.transcriber.poll(h.ms)
    finals = h.of("caption.final")
    assert [f.text for f in finals] == ["alpha beta gamma"]  # its tail was not cut off
    started = h.of("input_audio_buffer.speech_started")
    assert len(started) == 2 and started[1].audio_start_ms == second_start
    await h.settle()
    assert len(rec.requests[2].audio) >= 300 * 16  # the second utterance's audio kept while it waited
    h.audio(600)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms + 250)
    await h.settle()
    assert [f.text for f in h.of("caption.final")] == ["alpha beta gamma", "delta epsilon"]


async def test_final_decodes_when_no_result_covers_the_end():
    rec = ScriptedRecognizer([hyp("alpha beta")], finals=[hyp("alpha beta gamma")])
    h = Harness(rec, decode_interval_ms=600)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(700)
    h.audio(400)
    h.transcriber.on_speech(SpeechEvent("end", h.ms - 300), h.ms)
    await h.settle()
    assert len(rec.requests) == 2
    assert len(rec.requests[1].audio) == (h.ms - 300 + 150) * 16  # cut at the end of speech plus the tail
    assert h.of("caption.final")[0].text == "alpha beta gamma"


async def test_speech_that_resumes_after_a_pause_gets_a_new_final_decode():
    rec = ScriptedRecognizer([hyp("one two")] * 3, finals=[hyp("one two"), hyp("one two three four")])
    h = Harness(rec, decode_interval_ms=400)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(800)
    h.transcriber.on_speech(SpeechEvent("pause", h.ms), h.ms)
    await h.speak(200)
    assert len(rec.final_requests) == 1
    h.transcriber.on_speech(SpeechEvent("resume", h.ms), h.ms)
    await h.speak(600)
    end = h.ms
    h.transcriber.on_speech(SpeechEvent("pause", end), h.ms)
    await h.speak(300)
    h.transcriber.on_speech(SpeechEvent("end", end), h.ms)
    await h.settle()
    assert len(rec.final_requests) == 2 and len(rec.final_requests[1].audio) == (end + 150) * 16
    assert [f.text for f in h.of("caption.final")] == ["one two three four"]


async def test_utterances_queued_behind_a_slow_final_each_get_their_own_final():
    """Three utterances start and end while the first one's final decode runs: none is lost, none is merged
    into another, and a finished utterance is never extended by a later end."""
    rec = ScriptedRecognizer([], finals=[hyp("first one"), hyp("rear left"), hyp("third words")], delay=1.0)
    h = Harness(rec, decode_interval_ms=10_000)
    h.audio(200)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    h.audio(1000)
    h.transcriber.on_speech(SpeechEvent("end", 1000), h.ms)  # its final decode starts, and takes a second
    spans = [(1500, 2100), (2600, 3400)]
    for start, end in spans:
        h.audio(start + 300 - h.ms)
        h.transcriber.on_speech(SpeechEvent("start", start), h.ms)
        h.audio(end + 300 - h.ms)
        h.transcriber.on_speech(SpeechEvent("end", end), h.ms)
    assert h.transcriber.pending_utterances == 3
    for _ in range(3):
        await h.settle()
        h.transcriber.poll(h.ms)
    finals = h.of("caption.final")
    assert [f.text for f in finals] == ["first one", "rear left", "third words"]
    assert [(f.audio_start_ms, f.audio_end_ms) for f in finals] == [(0, 1000), *spans]
    # each final decode heard its own utterance: from the pre-roll to the end plus the tail
    assert [len(r.audio) // 16 for r in rec.final_requests] == [1150, 600 + 200 + 150, 800 + 200 + 150]
    stopped = [e.audio_end_ms for e in h.of("input_audio_buffer.speech_stopped")]
    assert stopped == [1000, 2100, 3400]
    assert finals[-1].behind_ms >= 0 and h.transcriber.pending_utterances == 0


async def test_a_final_without_a_usable_decode_is_what_the_partials_showed():
    rec = ScriptedRecognizer([hyp("alpha beta"), hyp("alpha beta gamma")],
                             finals=[hyp("la la la", compression_ratio=3.0)])
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(600)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert h.of("caption.final")[0].text == "alpha beta gamma"


@pytest.mark.parametrize(("partials", "final", "shown"), [
    (["K"], "", ""),  # a guess from less audio than the final decode heard: the decode's silence wins
    (["please check the", "please check the number"], "", "please check the number"),  # committed words stay
    (["K"], "okay", "okay"),
])
async def test_an_empty_final_decode_wins_over_tentative_partials_only(partials, final, shown):
    rec = ScriptedRecognizer([hyp(p) for p in partials], finals=[hyp(final)])
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(300 * len(partials))
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert h.of("caption.partial"), "the utterance showed partials, so it is closed by a final"
    assert [f.text for f in h.of("caption.final")] == [shown]


async def test_tentative_partials_that_repeat_the_previous_final_stand_against_an_empty_final_decode():
    """The context cut may take a repeat of the previous final's end for the context's own words."""
    rec = ScriptedRecognizer([hyp("yes please")] * 4, finals=[hyp("Yes, please."), hyp("")])
    h = Harness(rec, decode_interval_ms=300)
    for _ in range(2):
        h.transcriber.on_speech(SpeechEvent("start", h.ms), h.ms)
        await h.speak(300)
        h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
        await h.settle()
        h.audio(300)
    assert [f.text for f in h.of("caption.final")] == ["Yes, please.", "yes please"]


async def test_a_final_ending_in_an_echo_of_its_own_words_loses_the_echo():
    echo = "I'm sideshow joined by Custer and we've got a special edition of plat chat We've got a special edition of"
    rec = ScriptedRecognizer([], finals=[hyp(echo)])
    h = Harness(rec, decode_interval_ms=10_000)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(2000)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert [f.text for f in h.of("caption.final")] == [
        "I'm sideshow joined by Custer and we've got a special edition of plat chat"]
    assert h.transcriber.stats()["repeats_dropped"] == 1


@pytest.mark.parametrize(("unheard_ms", "shown"), [
    (0, "We're just saying some words"),  # the partials heard it all and agreed: "just saying" is an echo
    (500, "We're just saying some words just saying"),  # half a second the partials never heard: maybe said
])
async def test_a_short_echo_goes_only_where_the_partials_heard_the_utterance_to_its_end(unheard_ms, shown):
    said = "We're just saying some words"
    rec = ScriptedRecognizer([hyp(said), hyp(said)], finals=[hyp(f"{said} just saying")])
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(600)
    h.audio(unheard_ms)  # speech no partial decoded
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert h.of("caption.partial")[-1].committed == said
    assert [f.text for f in h.of("caption.final")] == [shown]


def test_a_short_echo_is_cut_only_when_it_repeats_what_was_heard():
    from rtc_agent.apps.captions.local_agreement import drop_unheard_echo

    heard = ["We're", "just", "saying", "some", "words"]
    assert drop_unheard_echo([*heard, "just", "saying"], heard) == heard
    assert drop_unheard_echo([*heard, "thanks"], heard) == [*heard, "thanks"]  # other words: said after all
    assert drop_unheard_echo([*heard, "just", "saying", "some", "words"], heard) == [
        *heard, "just", "saying", "some", "words"]  # four words: drop_echoed_tail's case
    assert drop_unheard_echo(["We", "are", "saying", "just"], heard) == ["We", "are", "saying", "just"]
    assert drop_unheard_echo(["it", "is", "what", "it", "is"], ["it", "is", "what"]) == ["it", "is", "what"]
    assert drop_unheard_echo(heard, []) == heard and drop_unheard_echo([], heard) == []


async def test_a_final_decode_that_stops_short_of_the_committed_words_gets_them_back():
    rec = ScriptedRecognizer([hyp("there's some speakers but"), hyp("there's some speakers but who")],
                             finals=[hyp("There's some speakers.")])
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(600)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert h.of("caption.partial")[-1].committed == "there's some speakers but"
    assert [f.text for f in h.of("caption.final")] == ["There's some speakers but"]


async def test_a_final_decode_that_lost_the_committed_words_gives_way_to_them():
    """Beam search on a short utterance alone collapsed into a word said twice; two agreeing partials had the
    utterance: the final is what they showed, and the transcriber counts it."""
    said = "playback of the list of people attending is complete"
    rec = ScriptedRecognizer([hyp(said), hyp(said)], finals=[hyp("Playback Playback")])
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(600)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert h.of("caption.partial")[-1].committed == said
    assert [f.text for f in h.of("caption.final")] == [said]
    assert h.transcriber.stats()["lost_finals"] == 1


def test_a_final_loses_the_committed_words_only_when_it_keeps_few_of_them_in_few_words():
    from rtc_agent.apps.captions.local_agreement import loses_committed

    committed = ["playback", "of", "the", "list", "of", "people", "attending", "is"]
    assert loses_committed(["Playback", "Playback"], committed)
    assert loses_committed(["Thank", "you."], committed)
    assert not loses_committed(["Playback", "of", "the", "list", "of", "people."], committed)  # stopped short: kept
    assert not loses_committed(["The", "playlist", "of", "the", "people", "attending", "is", "complete."], committed)
    assert not loses_committed(["Okay."], ["okay", "so", "yes"])  # three committed words: too few to judge
    assert not loses_committed([], committed[:2]) and loses_committed([], committed)


def test_words_committed_after_a_pause_do_not_join_the_final_of_the_part_before_it():
    """Speech resumed after a pause and partials committed words past it before the final decode made at the pause
    arrived: the split's final is that decode's text, without them (the next part decodes them)."""
    from rtc_agent.apps.audio_ring import AudioRing
    from rtc_agent.apps.captions.caption_writer import CaptionWriter, FinalDecode
    from rtc_agent.apps.captions.earlier_finals import EarlierFinals
    from rtc_agent.apps.captions.utterance_audio import UtteranceAudio

    events: list = []
    buffer = UtteranceAudio()
    buffer.reset(np.zeros(16000 * 4, dtype=np.float32), 0)
    writer = CaptionWriter(TranscriberConfig(language="en", min_commit_ms=0), events.append,
                           EarlierFinals(context_s=0, budget_ms=450, preroll_ms=200, max_finals=4), buffer,
                           AudioRing(10.0))
    writer.begin(0)
    for _ in range(2):  # heard up to 3.5 s: the words after the pause at 2 s are committed
        writer.apply_partial(hyp("the part before and the part after"), 3500)
    assert writer.committed_text() == "the part before and the part after"
    writer.final = FinalDecode(hyp("The part before"), 2150)  # the decode made at the pause, to 2 s + its tail
    assert writer.split(2000, 2150)
    assert [e.text for e in events if e.type == "caption.final"] == ["The part before"]


def test_committed_words_follow_a_final_only_where_it_ends_inside_them():
    from rtc_agent.apps.captions.local_agreement import with_committed_tail

    committed = ["there's", "some", "speakers", "but"]
    assert with_committed_tail(["There's", "some", "speakers."], committed) == ["There's", "some", "speakers", "but"]
    # the final goes on past them, or says something else at its end: it stands
    assert with_committed_tail(["There's", "some", "speech", "errors"], committed) == [
        "There's", "some", "speech", "errors"]
    assert with_committed_tail(["Corpus", "I", "have", "a", "cold", "so", "I", "apply"],
                               ["I", "have", "a", "cold", "so", "p", "p"]) == [
        "Corpus", "I", "have", "a", "cold", "so", "I", "apply"]
    assert with_committed_tail(["so", "it", "goes"], committed) == ["so", "it", "goes"]  # one word alike: no match
    assert with_committed_tail(["hello"], ["hello", "there"]) == ["hello", "there"]
    assert with_committed_tail([], committed) == [] and with_committed_tail(["a"], []) == ["a"]


def test_an_echoed_tail_is_cut_but_what_people_repeat_stays():
    from rtc_agent.apps.captions.local_agreement import drop_echoed_tail

    assert drop_echoed_tail("we're just saying some words and here's more we're just saying some") == (
        "we're just saying some words and here's more")
    assert drop_echoed_tail("it is what it is") == "it is what it is"  # two words: what people say
    assert drop_echoed_tail("words words words words and words words words words") == (
        "words words words words and words words words words")  # one word said over and over
    assert drop_echoed_tail("Followed by the pound key.") == "Followed by the pound key."
    assert drop_echoed_tail("a b c d a b c d") == "a b c d a b c d"  # right after itself: drop_loops' case
    assert drop_echoed_tail("") == ""


async def test_finals_never_repeat_a_sentence_or_the_previous_tail():
    rec = ScriptedRecognizer([], finals=[
        hyp("A new release in the second week of March. The new release in the 2nd week of March."),
        hyp("of March. We measured the latency."),
    ])
    h = Harness(rec, decode_interval_ms=10_000)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(2000)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    h.audio(100)  # the next utterance's pre-roll reaches into the previous one
    h.transcriber.on_speech(SpeechEvent("start", h.ms - 50), h.ms)
    await h.speak(1500)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert [f.text for f in h.of("caption.final")] == ["A new release in the second week of March.",
                                                        "We measured the latency."]
    assert h.transcriber.stats()["repeats_dropped"] == 2
    # the previous final is the decoder's context
    assert rec.final_requests[1].prompt == "A new release in the second week of March."


async def test_partials_say_how_far_behind_they_are():
    rec = ScriptedRecognizer([hyp("slow words")] * 3, delay=0.3)
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    h.audio(400)
    h.transcriber.poll(h.ms)
    await asyncio.sleep(0.1)
    h.audio(1000)  # audio keeps arriving while the decode runs
    await h.settle()
    partial = h.of("caption.partial")[0]
    assert partial.behind_ms == h.ms - partial.audio_end_ms == 1000
    assert h.transcriber.stats()["max_behind_ms"] == 1000


async def test_silence_guard_drops_hallucinations():
    silent = dict(no_speech_prob=0.9, avg_logprob=-1.5)
    rec = ScriptedRecognizer([hyp("Thank you.", **silent), hyp("Thank you.", **silent), hyp("you", **silent)])
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(900)
    h.transcriber.on_speech(SpeechEvent("end", h.ms), h.ms)
    await h.settle()
    assert h.of("caption.partial") == [] and h.of("caption.final") == []
    assert h.transcriber.stats()["dropped_results"] >= 2


async def test_repetitive_results_are_dropped():
    rec = ScriptedRecognizer([hyp("la la la", compression_ratio=3.0), hyp("real words")])
    h = Harness(rec, decode_interval_ms=300)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(600)
    assert [p.tentative for p in h.of("caption.partial")] == ["real words"]


async def test_long_speech_is_trimmed_at_a_committed_segment_boundary():
    first = [(0.0, 6.0, " first sentence here."), (6.0, 16.0, " second one")]
    rec = ScriptedRecognizer([hyp("first sentence here. second", [*first[:1], (6.0, 16.0, " second")]),
                              hyp("first sentence here. second one", first)] + [hyp("one more")] * 5)
    h = Harness(rec, decode_interval_ms=16_000, trim_after_s=15.0)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    h.audio(16_500)
    h.transcriber.poll(h.ms)
    await h.settle()
    h.audio(100)
    h.transcriber.poll(h.ms + 16_000)  # the next partial decode is due
    await h.settle()
    finals = h.of("caption.final")
    assert [f.text for f in finals] == ["first sentence here."]
    assert finals[0].audio_end_ms == 6000
    assert h.transcriber.buffer_ms == 16_600 - 6000  # the audio before the boundary is gone
    h.audio(100)
    h.transcriber.poll(h.ms + 32_000)
    await h.settle()
    assert rec.requests[-1].prefix == "second"  # committed words past the boundary stay as the prefix
    last = h.of("caption.partial")[-1]
    assert last.segment_id != finals[0].segment_id
    assert last.committed.startswith("second") and last.audio_start_ms == 6000


async def test_hard_limit_without_boundary_finalizes_everything():
    rec = ScriptedRecognizer([hyp("no timestamps at all")] * 3)
    h = Harness(rec, decode_interval_ms=5000, trim_after_s=15.0, hard_limit_s=19.0)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(21_000, step_ms=1000)
    finals = h.of("caption.final")
    assert finals and "no timestamps at all" in finals[0].text
    assert h.transcriber.buffer_ms < 5000


async def test_engine_errors_are_reported_once_and_the_utterance_goes_on():
    busy = AtCapacity("busy", code="engine_overloaded")
    rec = ScriptedRecognizer([busy, busy, hyp("finally")])
    h = Harness(rec, decode_interval_ms=200)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(800)
    errors = h.of("error")
    assert len(errors) == 1 and errors[0].error.code == "engine_overloaded"
    assert h.of("caption.partial")[-1].tentative == "finally"


async def test_auto_language_waits_for_enough_audio_and_keeps_one_language_per_utterance():
    """With ``auto`` nothing is decoded (or labelled) from under 1.5 s of audio; the first decode's detection
    picks the utterance's language, and every later decode of the utterance uses it."""
    rec = ScriptedRecognizer([Transcript(text="hola", language="es", language_prob=0.9, audio_s=1.6,
                                         language_probs=[("es", 0.9), ("pt", 0.05)], prefix_applied=True),
                              hyp("hola amigos")])
    h = Harness(rec, language=None, decode_interval_ms=100)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(1400)
    assert rec.requests == []
    await h.speak(300)
    assert rec.requests[0].language is None and rec.requests[0].detect_language
    assert rec.requests[1].language == "es" and not rec.requests[1].detect_language
    assert {p.language for p in h.of("caption.partial")} == {"es"}


@pytest.mark.parametrize("text", ["", "one"])
async def test_flush_closes_an_open_utterance(text):
    rec = ScriptedRecognizer([hyp(text)] * 3, finals=[hyp(text)])
    h = Harness(rec, decode_interval_ms=200)
    h.transcriber.on_speech(SpeechEvent("start", 0), h.ms)
    await h.speak(400)
    h.transcriber.flush(h.ms)
    await h.settle()
    assert [f.text for f in h.of("caption.final")] == ([text] if text else [])


def test_decoder_loops_are_cut_but_real_repeats_stay():
    from rtc_agent.apps.captions.local_agreement import drop_loops

    looped = "Weasels have eaten our phone system. Weasels have eaten our phone system. Weasels"
    assert drop_loops(looped) == "Weasels have eaten our phone system."
    assert drop_loops("press one, press one, press one now") == "press one, press one, press one now"  # n < 3
    assert drop_loops("I said no no no to that") == "I said no no no to that"
    assert drop_loops("the new release in March the new release in March and later") == (
        "the new release in March and later")


async def test_the_final_decode_hears_the_previous_utterances_and_keeps_only_its_own_segments():
    first = hyp("Agent login.", [(0.0, 1.2, " Agent login.")])
    both = hyp("Agent login. Press star for help.", [(0.0, 1.2, " Agent login."), (2.3, 3.4, " Press star for help.")])
    rec = ScriptedRecognizer([], finals=[first, both])
    h = Harness(rec, decode_interval_ms=10_000, context_s=8.0)
    h.audio(200)
    h.transcriber.on_speech(SpeechEvent("start", 200), h.ms)
    h.audio(1100)
    h.transcriber.on_speech(SpeechEvent("end", 1300), h.ms)
    await h.settle()
    h.audio(900)  # a pause of a second, then the next utterance
    h.transcriber.on_speech(SpeechEvent("start", 2300), h.ms)
    h.audio(1200)
    h.transcriber.on_speech(SpeechEvent("end", 3200), h.ms)
    await h.settle()
    assert [f.text for f in h.of("caption.final")] == ["Agent login.", "Press star for help."]
    # from the first utterance's pre-roll to the second one's end plus the tail
    assert len(rec.final_requests[1].audio) == (3200 + 150 - 0) * 16


@pytest.mark.parametrize(("budget_ms", "decoded_again", "hears_context"),
                         [(10_000, False, True), (200, False, False), (200, True, True)])
async def test_slow_final_decodes_shrink_the_context_to_the_budget(budget_ms, decoded_again, hears_context):
    """The first final decode took ~0.3 s for ~1.45 s of audio: with a 0.2 s budget the next one may hear only
    ~1 s of audio, so not the previous utterance; with a 10 s budget it hears it. A decode the engine's repetition
    guard ran twice says nothing of the usual speed: it leaves the context whole."""
    first = hyp("Agent login.", [(0.0, 1.2, " Agent login.")], decoded_again=decoded_again)
    both = hyp("Agent login. Press star for help.", [(0.0, 1.2, " Agent login."), (2.3, 3.4, " Press star for help.")])
    alone = hyp("Press star for help.", [(0.0, 1.1, " Press star for help.")])
    rec = ScriptedRecognizer([], finals=[first, both if hears_context else alone], delay=0.3)
    h = Harness(rec, decode_interval_ms=10_000, context_s=8.0, final_budget_ms=budget_ms)
    h.audio(200)
    h.transcriber.on_speech(SpeechEvent("start", 200), h.ms)
    h.audio(1100)
    h.transcriber.on_speech(SpeechEvent("end", 1300), h.ms)
    await h.settle()
    limit = h.transcriber.context_limit_s()
    assert limit == 8.0 if hears_context else 0 < limit < 1.5  # (a slower machine only makes it smaller)
    h.audio(900)
    h.transcriber.on_speech(SpeechEvent("start", 2300), h.ms)
    h.audio(1200)
    h.transcriber.on_speech(SpeechEvent("end", 3200), h.ms)
    await h.settle()
    assert [f.text for f in h.of("caption.final")] == ["Agent login.", "Press star for help."]
    heard_ms = len(rec.final_requests[1].audio) // 16
    assert heard_ms == (3350 if hears_context else 3200 + 150 - 2100), heard_ms


@pytest.mark.parametrize(("partial_logprob", "hears_context"), [(-0.2, False), (-1.5, True)])
async def test_an_utterance_its_partials_found_hard_hears_more_earlier_speech(partial_logprob, hears_context):
    """Final decodes ran at 0.3 s for 1.45 s of audio; with a 420 ms budget the second utterance (1.25 s with its
    pre-roll and tail: short, 1.5x the budget) may hear ~3 s of audio, not the first utterance's whole 3.35 s. When
    its partial was unsure of its words (mean log-probability below ``HARD_LOGPROB``), its final may take
    ``HARD_BUDGET_FACTOR`` (2) times the budget: ~4 s, so it hears the first utterance."""
    first = hyp("Agent login.", [(0.0, 1.2, " Agent login.")])
    both = hyp("Agent login. Press star for help.", [(0.0, 1.2, " Agent login."), (2.3, 3.4, " Press star for help.")])
    alone = hyp("Press star for help.", [(0.0, 1.1, " Press star for help.")])
    rec = ScriptedRecognizer([hyp("Press", avg_logprob=partial_logprob)],
                             finals=[first, both if hears_context else alone])
    h = Harness(rec, decode_interval_ms=10_000, context_s=8.0, final_budget_ms=420)
    h.audio(200)
    h.transcriber.on_speech(SpeechEvent("start", 200), h.ms)
    h.audio(1100)
    h.transcriber.on_speech(SpeechEvent("end", 1300), h.ms)
    await h.settle()
    for _ in range(2):  # the median of the last three final decodes' speeds: 0.3 s for 1.45 s of audio
        h.transcriber.earlier.decoded(wall_s=0.3, audio_s=1.45)
    h.audio(900)
    h.transcriber.on_speech(SpeechEvent("start", 2300), h.ms)
    await h.speak(1200)  # one partial decode, once 300 ms of audio are there
    h.transcriber.on_speech(SpeechEvent("end", 3200), h.ms)
    await h.settle()
    assert len(rec.partial_requests) == 1
    assert [f.text for f in h.of("caption.final")] == ["Agent login.", "Press star for help."]
    heard_ms = len(rec.final_requests[1].audio) // 16
    assert heard_ms == (3350 if hears_context else 3350 - 2100), heard_ms
    assert h.transcriber.stats()["hard_finals"] == int(hears_context)


async def three_utterances(rec: ScriptedRecognizer) -> Harness:
    """Utterances at 0.2-1.3, 1.8-2.6 and 3.3-4.0 s, each final decode hearing up to 3 s of audio."""
    h = Harness(rec, decode_interval_ms=10_000, context_s=3.0, force_context=True, partial_context_ms=100)
    for start, end in [(200, 1300), (1800, 2600), (3300, 4000)]:
        h.audio(start - h.ms)
        h.transcriber.on_speech(SpeechEvent("start", start), h.ms)
        h.audio(end - start)
        h.transcriber.on_speech(SpeechEvent("end", end), h.ms)
        await h.settle()
    return h


async def test_the_earlier_finals_are_forced_and_a_cut_one_is_heard_once_the_engine_forces():
    """The final request carries the earlier finals as segments (times in its audio). Once the engine has forced a
    context, a span that cuts into an earlier final hears that final's last part (at least partial_context_ms):
    its whole text is forced over what is left of its audio."""
    first = hyp("Agent login.", [(0.0, 1.2, " Agent login.")])
    second = hyp("Press star.", [(1.8, 2.6, " Press star.")], context_forced=True)
    third = hyp("Thank you.", [(2.2, 2.9, " Thank you.")], context_forced=True)
    rec = ScriptedRecognizer([], finals=[first, second, third])
    h = await three_utterances(rec)
    assert [f.text for f in h.of("caption.final")] == ["Agent login.", "Press star.", "Thank you."]
    _, whole, cut = rec.final_requests
    assert whole.context == (Segment(0.2, 1.3, "Agent login."),)  # the first final, from the audio's start
    assert len(whole.audio) == 2600 * 16  # (the end is flushed at once: no tail)
    # 3 s before the third utterance's end (4000 ms) is 1000 ms: 300 ms of the first final are left, then the second
    assert len(cut.audio) == (4000 - 1000) * 16
    assert [(round(s.start, 3), round(s.end, 3), s.text) for s in cut.context] == [
        (0.0, 0.3, "Agent login."), (0.8, 1.6, "Press star.")]


async def test_a_cut_earlier_final_is_not_heard_by_an_engine_that_does_not_force_the_context():
    """An engine that cannot force (a remote one) would write the cut final's words again: whole finals only."""
    first = hyp("Agent login.", [(0.0, 1.2, " Agent login.")])
    second = hyp("Agent login. Press star.", [(0.0, 1.2, " Agent login."), (1.8, 2.6, " Press star.")])
    third = hyp("Press star. Thank you.", [(0.0, 0.9, " Press star."), (1.6, 2.3, " Thank you.")])
    rec = ScriptedRecognizer([], finals=[first, second, third])
    h = await three_utterances(rec)
    assert [f.text for f in h.of("caption.final")] == ["Agent login.", "Press star.", "Thank you."]
    assert len(rec.final_requests[2].audio) == (4000 - 1600) * 16  # from the second final's pre-roll
