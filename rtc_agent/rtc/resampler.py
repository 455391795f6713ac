"""PyAV audio resamplers that start no native threads: ours (``audio_resampler``) and aiortc's codecs'.

libavfilter gives a filter graph worker threads (one per core unless told otherwise) that live as long as the
graph, and since PyAV 18.1.1 a resampler's graph sits in a reference cycle that only the cyclic garbage collector
frees. Resampling 20 ms frames gains nothing from those threads, so every resampler of the package runs its graph
on the calling thread. aiortc's Opus, G.711 and G.722 encoders each make one too (a resampler per outgoing audio
track: on a 16-core server 16 idle threads per session, kept past its end until a collection);
:func:`thread_free_codecs` has them make theirs the same way.
"""

from __future__ import annotations

from typing import Any

import av


def audio_resampler(rate: int, format: str = "s16", layout: str = "mono") -> av.AudioResampler:
    """A resampler to ``rate`` Hz, ``format`` samples, ``layout`` channels, whose filter graph uses no threads."""
    return _thread_free_resampler(format=format, layout=layout, rate=rate)


def _thread_free_resampler(*args: Any, **kwargs: Any) -> av.AudioResampler:
    """``av.AudioResampler(...)`` with ``threads=1`` unless the caller chose a number."""
    kwargs.setdefault("threads", 1)
    return av.AudioResampler(*args, **kwargs)


def thread_free_codecs() -> None:
    """Make aiortc's audio encoders build their resamplers with :func:`_thread_free_resampler` (they look
    ``AudioResampler`` up in their module's namespace at construction). Idempotent."""
    from aiortc.codecs import g711, g722, opus

    for module in (g711, g722, opus):
        module.AudioResampler = _thread_free_resampler  # type: ignore[attr-defined]
