"""Cutting a final decode of *context + utterance* down to the utterance.

The final decode of an utterance also hears the session's previous utterances (their audio), because Whisper
hears a voice better with more of it; only the text of the new utterance is kept. Whisper's segment timestamps
say where most of it starts, but a segment may straddle the boundary ("...followed by the pound key is now in the
conference.", with the boundary after "key"). Such a segment is split where its words stop matching the end of
the context's known text (the finals already shown for that audio), when that agrees with the segment's timing;
otherwise the segment's middle decides.
"""

from __future__ import annotations

import dataclasses
import difflib

from rtc_agent.engines.asr.base import Segment, Transcript
from rtc_agent.words import normalize

__all__ = ["without_context"]

#: Timestamps are this coarse: a segment ending (or starting) this close to the boundary lies on its side.
STRADDLE_SLACK_S = 0.3
#: Context words compared with a straddling segment (its end: the segment starts somewhere inside it).
CONTEXT_TAIL_WORDS = 60
#: A match must end this close to the end of the context's text (words): the straddling segment goes on from there.
END_SLACK_WORDS = 1
#: A text cut must lie near where the segment's timing puts the boundary (spoken at an even pace): within this many
#: words, or this share of the segment's words. Otherwise an utterance that repeats the context's last words
#: ("...followed by the pound key." then "Followed by the pound key.") would lose them.
CUT_SLACK_WORDS = 2
CUT_SLACK_SHARE = 0.25


def context_words_in(words: list[str], context_text: str) -> int:
    """How many leading ``words`` repeat the end of ``context_text``: the end of the longest run of them that
    matches the context's words up to (nearly) the context's end; 0 when none does."""
    context = [w for w in (normalize(x) for x in context_text.split()[-CONTEXT_TAIL_WORDS:]) if w]
    said = [normalize(w) for w in words]
    if not context or not said:
        return 0
    best = 0
    matcher = difflib.SequenceMatcher(None, context, said, autojunk=False)
    for block in matcher.get_matching_blocks():
        ends_context = block.a + block.size >= len(context) - END_SLACK_WORDS
        if block.size and ends_context and (block.size >= 2 or block.b + block.size == 1):
            best = max(best, block.b + block.size)
    return best


def _split(seg: Segment, context_s: float, context_text: str) -> Segment | None:
    """The utterance's part of a segment that straddles the boundary (None: nothing of it)."""
    words = seg.text.split()
    cut = context_words_in(words, context_text) if context_text else 0
    expected = len(words) * (context_s - seg.start) / max(seg.end - seg.start, 1e-3)
    if abs(cut - expected) > max(CUT_SLACK_WORDS, CUT_SLACK_SHARE * len(words)):
        cut = 0  # the text and the timing disagree: trust neither cut, use the segment's middle
    if cut == 0:
        return seg if (seg.start + seg.end) / 2 >= context_s else None
    rest = words[cut:]
    return Segment(context_s, seg.end, " " + " ".join(rest)) if rest else None


def without_context(t: Transcript, context_s: float, context_text: str = "") -> Transcript:
    """A transcript of ``context_s`` seconds of context followed by an utterance, cut to the utterance: segments
    after the boundary are kept, those before it dropped, a straddling one split against ``context_text`` (the
    context's known text); times shifted to the utterance's audio."""
    kept: list[Segment] = []
    for seg in t.segments:
        if seg.end <= context_s + STRADDLE_SLACK_S and (seg.start + seg.end) / 2 < context_s:
            continue  # the context's
        if seg.start < context_s - STRADDLE_SLACK_S:
            part = _split(seg, context_s, context_text)
            if part is None:
                continue
            seg = part
        kept.append(Segment(max(0.0, seg.start - context_s), max(0.0, seg.end - context_s), seg.text))
    return dataclasses.replace(t, text="".join(seg.text for seg in kept).strip(), segments=kept,
                               audio_s=max(0.0, t.audio_s - context_s))
