"""Cutting a final decode of *context + utterance* down to the utterance.

The final decode of an utterance also hears the session's previous utterances (their audio), because Whisper
hears a voice better with more of it; only the text of the new utterance is kept. Whisper's segment timestamps
say where most of it starts, but a segment may straddle the boundary ("...followed by the pound key is now in the
conference.", with the boundary after "key"). Such a segment is split where its words stop matching the end of
the context's known text (the finals already shown for that audio), when that agrees with the segment's timing;
otherwise the segment's middle decides. The timing counts speech only: from the context's last final to the
utterance the VAD heard none, so a segment that spans that pause has no words in it.

A segment that starts in that pause and runs on into the utterance is the utterance's, whole (its words may repeat
the context's: "...followed by the pound key." then "Followed by the pound key."). One that starts and ends in the
pause is speech the VAD missed (a quiet voice, a recording it does not take for speech) or the end of the last final
that its decode lost: it goes with the utterance, less any words that repeat the end of the context's text, when
its audio is voiced (``voiced``: seconds of it above the noise) for at least ``GAP_VOICED_S``; otherwise it is
dropped, as words Whisper may write over silence.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable

from rtc_agent.engines.asr.base import Segment, Transcript
from rtc_agent.words import normalize, normalized

__all__ = ["without_context"]

#: Timestamps are this coarse: a segment ending (or starting) this close to the boundary lies on its side.
STRADDLE_SLACK_S = 0.3
#: Context words compared with a straddling segment (its end: the segment starts somewhere inside it).
CONTEXT_TAIL_WORDS = 60
#: A match must end this close to the end of the context's text (words): the straddling segment goes on from there.
END_SLACK_WORDS = 1
#: ...or further from it, when the context words after the match (at most this many) all occur in the match: an
#: echo its final decode heard in the padding ("We're just saying some words just saying"), not speech after it.
ECHO_SLACK_WORDS = 3
#: A word the match ends inside, at the context's end, repeats the context's last word when the match holds this
#: share of its letters: an ending the other decode heard differently (``foe`` / ``foes``, ``vanish`` / ``vanished``).
PARTIAL_WORD_SHARE = 2 / 3
#: A text cut must lie near where the segment's timing puts the boundary (spoken at an even pace): within this many
#: words, or this share of the segment's words. Otherwise an utterance that repeats the context's last words
#: ("...followed by the pound key." then "Followed by the pound key.") would lose them.
CUT_SLACK_WORDS = 2
CUT_SLACK_SHARE = 0.25
#: A segment in the pause before the utterance is kept when this much of its audio is voiced (seconds).
GAP_VOICED_S = 0.3


def _run_together(words: list[str]) -> tuple[str, list[int]]:
    """``words``' letters with nothing between them, and where each word ends in that string."""
    ends: list[int] = []
    total = 0
    for word in words:
        total += len(word)
        ends.append(total)
    return "".join(words), ends


def context_words_in(words: list[str], context_text: str) -> int:
    """How many leading ``words`` repeat the end of ``context_text``: the end of the longest run of them that
    matches the context's words up to (nearly) the context's end, or up to an echo of the run's own words at the
    context's end; 0 when none does.

    Compared letter by letter with the spaces and hyphens left out, so a compound written open in one decode and
    closed or hyphenated in the other (``thy self-thy foe`` / ``thyself thy foe``) still matches. A run counts
    when it holds two whole words, or the first word alone; a word the match ends inside counts too when the match
    reaches the context's last letter and holds ``PARTIAL_WORD_SHARE`` of it (``foe`` / ``foes``), and so do the
    words right after such a match that repeat the context's last word ("...some more words, words, words, words"
    where the earlier final, its loop cut, ended at "some more words")."""
    context = [w for w in (normalize(x) for x in context_text.split()[-CONTEXT_TAIL_WORDS:]) if w]
    said = normalized(words)
    if not context or not any(said):
        return 0
    context_letters, context_ends = _run_together(context)
    said_letters, said_ends = _run_together(said)
    best = 0
    matcher = difflib.SequenceMatcher(None, context_letters, said_letters, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        if not size:
            continue
        inside = [w for w, end in zip(context, context_ends, strict=True) if end - len(w) >= a and end <= a + size]
        after = [w for w, end in zip(context, context_ends, strict=True) if end > a + size]
        if not (len(after) <= END_SLACK_WORDS or (len(after) <= ECHO_SLACK_WORDS and set(after) <= set(inside))):
            continue
        whole = [i for i, end in enumerate(said_ends) if said[i] and end - len(said[i]) >= b and end <= b + size]
        if not (len(whole) >= 2 or whole == [0]):
            continue
        count = whole[-1] + 1
        if a + size == len(context_letters) and count < len(said):
            start = said_ends[count] - len(said[count])
            if said[count] and b + size - start >= PARTIAL_WORD_SHARE * len(said[count]):
                count += 1
            while count < len(said) and said[count] == context[-1]:  # the context's last word said again
                count += 1
        best = max(best, count)
    return best


def _split(seg: Segment, context_s: float, context_text: str, speech_end_s: float) -> Segment | None:
    """The utterance's part of a segment that straddles the boundary (None: nothing of it); ``speech_end_s``:
    where the context's speech ends."""
    words = seg.text.split()
    cut = context_words_in(words, context_text) if context_text else 0
    before = max(0.0, min(speech_end_s, context_s) - seg.start)  # the segment's speech before the boundary
    after = max(0.0, seg.end - context_s)
    expected = len(words) * before / max(before + after, 1e-3)
    if abs(cut - expected) > max(CUT_SLACK_WORDS, CUT_SLACK_SHARE * len(words)):
        cut = 0  # the text and the timing disagree: trust neither cut, use the segment's middle
    if cut == 0:
        return seg if (seg.start + seg.end) / 2 >= context_s else None
    rest = words[cut:]
    return Segment(context_s, seg.end, " " + " ".join(rest)) if rest else None


def _in_gap(seg: Segment, context_text: str, voiced: Callable[[float, float], float]) -> Segment | None:
    """A segment that starts in the pause before the utterance, less the words that repeat the context's text;
    None when nothing is left or its audio is not voiced."""
    words = seg.text.split()
    rest = words[context_words_in(words, context_text):]
    if not rest or voiced(seg.start, seg.end) < GAP_VOICED_S:
        return None
    return Segment(seg.start, seg.end, " " + " ".join(rest))


def without_context(t: Transcript, context_s: float, context_text: str = "", speech_end_s: float | None = None,
                    voiced: Callable[[float, float], float] | None = None) -> Transcript:
    """A transcript of ``context_s`` seconds of context followed by an utterance, cut to the utterance: segments
    after the boundary are kept, those before it dropped, a straddling one split against ``context_text`` (the
    context's known text, whose speech ends at ``speech_end_s``: None, at the boundary); a segment starting in the
    pause between (after ``speech_end_s``) kept as the module docstring says (``voiced(start_s, end_s)``: seconds
    of voiced audio; None: no pause rule, such a segment is cut as any other); times shifted to the utterance's
    audio (a kept pause segment starts at 0)."""
    speech_end = context_s if speech_end_s is None else speech_end_s
    kept: list[Segment] = []
    for seg in t.segments:
        if voiced is not None and speech_end <= seg.start < context_s - STRADDLE_SLACK_S:
            if seg.end > context_s + STRADDLE_SLACK_S:  # runs on into the utterance: all of it is the utterance's
                kept.append(Segment(0.0, seg.end - context_s, seg.text))  # (a repeat of the context's words too)
                continue
            part = _in_gap(seg, context_text, voiced)
            if part is not None:
                kept.append(Segment(0.0, max(0.0, part.end - context_s), part.text))
            continue
        if seg.end <= context_s + STRADDLE_SLACK_S and (seg.start + seg.end) / 2 < context_s:
            continue  # the context's
        if seg.start < context_s - STRADDLE_SLACK_S:
            part = _split(seg, context_s, context_text, speech_end)
            if part is None:
                continue
            seg = part
        kept.append(Segment(max(0.0, seg.start - context_s), max(0.0, seg.end - context_s), seg.text))
    return dataclasses.replace(t, text="".join(seg.text for seg in kept).strip(), segments=kept,
                               audio_s=max(0.0, t.audio_s - context_s))
