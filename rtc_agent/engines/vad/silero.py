"""Silero VAD on ONNX Runtime, one shared model for every session.

The packaged ``silero_vad.onnx`` is stateful: each audio stream carries its own recurrent state and the last 64
samples of context (:class:`VadStream`). A batch of requests from several sessions is stepped window by window
with the states stacked, so concurrent sessions share one model call per 32 ms window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtc_agent.engines.assets import package_file
from rtc_agent.worker import EngineSpec

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
WINDOW_SAMPLES = 512  # 32 ms, the window Silero VAD takes at 16 kHz
CONTEXT_SAMPLES = 64


@dataclass
class VadStream:
    """The model state of one audio stream; owned by its session, updated by the engine."""

    state: np.ndarray = field(default_factory=lambda: np.zeros((2, 1, 128), dtype=np.float32))
    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT_SAMPLES, dtype=np.float32))

    def reset(self) -> None:
        self.state = np.zeros((2, 1, 128), dtype=np.float32)
        self.context = np.zeros(CONTEXT_SAMPLES, dtype=np.float32)


@dataclass
class VadRequest:
    """Speech probabilities for ``windows`` (``[n, 512]`` float32 at 16 kHz, -1..1) of one stream, in order."""

    stream: VadStream
    windows: np.ndarray


class SileroVad:
    """Worker engine: ``run_batch([VadRequest, ...]) -> [np.ndarray of n probabilities, ...]``."""

    def __init__(self) -> None:
        self.session: Any = None

    def load(self, progress: Callable[[str], None]) -> None:
        import onnxruntime

        path = package_file("silero_vad", "data", "silero_vad.onnx")
        progress(f"loading {path.name}")
        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(path), sess_options=opts,
                                                    providers=["CPUExecutionProvider"])
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)

    def run_batch(self, requests: list[VadRequest]) -> list[np.ndarray]:
        for req in requests:
            if req.windows.ndim != 2 or req.windows.shape[1] != WINDOW_SAMPLES:
                raise ValueError(f"VAD windows must have shape [n, {WINDOW_SAMPLES}], got {req.windows.shape}")
        probs = [np.zeros(len(r.windows), dtype=np.float32) for r in requests]
        steps = max((len(r.windows) for r in requests), default=0)
        for step in range(steps):
            active = [i for i, r in enumerate(requests) if step < len(r.windows)]
            inputs = np.stack([
                np.concatenate([requests[i].stream.context, requests[i].windows[step].astype(np.float32)])
                for i in active
            ])
            state = np.concatenate([requests[i].stream.state for i in active], axis=1)
            out, new_state = self.session.run(None, {"input": inputs, "state": state, "sr": self._sr})
            for row, i in enumerate(active):
                stream = requests[i].stream
                stream.state = new_state[:, row:row + 1, :].copy()
                stream.context = inputs[row, -CONTEXT_SAMPLES:].copy()
                probs[i][step] = out[row, 0]
        return probs

    def close(self) -> None:
        self.session = None


def speech_probabilities(engine: SileroVad, audio: np.ndarray) -> np.ndarray:
    """Offline helper: the speech probability of every full 32 ms window of ``audio`` (16 kHz float)."""
    n = len(audio) // WINDOW_SAMPLES
    windows = audio[: n * WINDOW_SAMPLES].reshape(n, WINDOW_SAMPLES).astype(np.float32)
    start = time.monotonic()
    probs = engine.run_batch([VadRequest(VadStream(), windows)])[0]
    log.debug("VAD of %.1f s took %.3f s", len(audio) / SAMPLE_RATE, time.monotonic() - start)
    return probs


def engine_spec(settings: Any) -> EngineSpec:
    return EngineSpec(name="vad", factory=SileroVad, max_queue=256, max_batch=32, batch_window_ms=2.0)
