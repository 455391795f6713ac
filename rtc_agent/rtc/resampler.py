"""``audio_resampler``: a PyAV audio resampler that starts no native threads.

libavfilter gives a filter graph worker threads (one per core unless told otherwise) that live as long as the
graph, and since PyAV 18.1.1 a resampler's graph sits in a reference cycle that only the cyclic garbage collector
frees: a server that made a resampler per session or per utterance would hold threads long after their media
ended. Resampling 20 ms frames gains nothing from those threads, so every resampler of the package runs its
graph on the calling thread.
"""

from __future__ import annotations

import av


def audio_resampler(rate: int, format: str = "s16", layout: str = "mono") -> av.AudioResampler:
    """A resampler to ``rate`` Hz, ``format`` samples, ``layout`` channels, whose filter graph uses no threads."""
    return av.AudioResampler(format=format, layout=layout, rate=rate, threads=1)
