"""The MOSS-VL-Realtime chat format: its protocol tokens and how a drain of frames and prompts becomes context text.

A frame enters the context as its timestamp wrapper (:func:`frame_wrapper`); :class:`ChatFormat` renders one drain
(:class:`Segment`) with the rules stated in :mod:`rtc_agent.engines.vlm.realtime`. Nothing here imports a model
library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "ELLIPSIS",
    "HIDDEN_TOKENS",
    "IMAGE_PLACEHOLDER",
    "REPLACEMENT_CHAR",
    "ROUND_END",
    "ROUND_START",
    "SILENCE",
    "ChatFormat",
    "MossChatFormat",
    "Segment",
    "frame_wrapper",
]

SILENCE = "<|silence|>"
ELLIPSIS = "<|...|>"
ROUND_START = "<|round_start|>"
ROUND_END = "<|round_end|>"
IMAGE_PLACEHOLDER = "<|image|>"
REPLACEMENT_CHAR = "\ufffd"

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful AI assistant specializing in real-time video analysis. "
    "The video streams to you frame by frame. At every frame, you decide independently "
    "whether to respond or stay silent — output `<|silence|>` when nothing relevant has happened, "
    "and respond when the visual content warrants it."
)
"""The reference service's default system prompt (``run_online_inference.py``)."""

# Control tokens a model or service may put in raw output that are never shown as text.
HIDDEN_TOKENS = frozenset({"<|response|>", "<|assistant|>", "<|im_end|>", "<|im_start|>", "<|endoftext|>",
                           "<|eot_id|>", ELLIPSIS})


def frame_wrapper(timestamp: float, image_token: str = IMAGE_PLACEHOLDER) -> str:
    """The text a frame enters the context as: its timestamp with one decimal, then the image placeholder."""
    return f"<|vision_start|><|time_start|>{timestamp:.1f} seconds<|time_end|>{image_token}<|vision_end|>"


@dataclass(frozen=True, slots=True)
class Segment:
    """One drain of the input queues, rendered: ``text`` (with one image placeholder per frame, in order),
    ``images`` and their ``timestamps`` (ascending), and the ``prompts`` it opens (in arrival order)."""

    text: str
    images: tuple[Any, ...] = ()
    timestamps: tuple[float, ...] = ()
    prompts: tuple[str, ...] = ()


class ChatFormat:
    """How a drain becomes context text. The default is the MOSS-VL-Realtime format (the rules in
    :mod:`rtc_agent.engines.vlm.realtime`);
    backends whose model was trained on another chat template override it (see
    ``rtc_agent.engines.vlm.transformers_vlm``)."""

    image_placeholder = IMAGE_PLACEHOLDER
    silence_text = SILENCE

    def frame(self, timestamp: float) -> str:
        return frame_wrapper(timestamp, self.image_placeholder)

    def prompt(self, prompt: str) -> str:
        return f"<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"

    def segment(self, prompts: Sequence[str], timestamps: Sequence[float]) -> str:
        """Prompts first (each followed by the silence opener when frames come in the same drain), then frames."""
        text = ""
        for prompt in prompts:
            text += self.prompt(prompt)
            if timestamps:
                text += self.silence_text
        for ts in timestamps:
            text += self.frame(ts)
        return text

    def generated(self, token_id: int, is_silence: bool) -> None:
        """Told about every token the model generated (stateful formats track turn ends here)."""


class MossChatFormat(ChatFormat):
    """The MOSS-VL-Realtime format (the default), by name."""
