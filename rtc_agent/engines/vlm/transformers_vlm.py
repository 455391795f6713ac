"""Transformers image-text-to-text models as realtime vision backends.

:class:`TransformersVLMEngine` loads a model folder with ``AutoProcessor`` and ``AutoModelForImageTextToText`` (or
``AutoModelForCausalLM``), from local files only: nothing is downloaded at run time.

- A model that exposes ``create_realtime_session`` (MOSS-VL-Realtime, loaded with ``trust_remote_code``) runs
  its own reference session; :class:`~rtc_agent.engines.vlm.moss_native.MossNativeSession` adapts it to this
  project's session API (numpy frames become PIL images, raw output chunks become
  :class:`~rtc_agent.engines.vlm.outputs.VisionOutput` items).
- Any other model is driven incrementally by
  :class:`~rtc_agent.engines.vlm.transformers_source.TransformersTokenSource` behind
  :class:`~rtc_agent.engines.vlm.realtime.RealtimeVisionSession`: one KV cache per session, each drain of frames
  and prompts appended as a segment (frames with their timestamp wrapper, ``<|image|>`` replaced by the
  processor's image token) and decoded one token at a time.

Silence, honestly: a model whose vocabulary has ``<|silence|>`` is driven in the MOSS format and its silence
token parks the loop. A model without one was never trained to stay quiet: its end-of-turn tokens (EOS,
``<end_of_utterance>``, ``<|im_end|>``, ...) are taken as ``<|silence|>`` (it said what it had to say; the loop
waits for new input), and its turns follow its own chat template: the context starts inside the user turn with
the standing prompt, the first frames close that turn and open the assistant's, and after the model ended its
turn new frames open a new user turn. It describes each new input; it cannot decide that nothing changed.

Models with 3D rotary positions (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) get their positions computed per appended
segment from ``get_rope_index``; others use the cache length. The context is bounded: past
``max_context_tokens`` the history is dropped and the model starts again from its initial prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtc_agent.engines.vlm.base import SessionOptions, VLMEngine
from rtc_agent.engines.vlm.moss_native import MossNativeSession
from rtc_agent.engines.vlm.realtime import RealtimeVisionSession
from rtc_agent.engines.vlm.session import VisionSession
from rtc_agent.engines.vlm.transformers_source import TransformersTokenSource

__all__ = ["TransformersVLMEngine"]


class TransformersVLMEngine(VLMEngine):
    """A transformers vision-language model from a local folder (``--vlm-engine transformers``, or ``moss``
    without a URL, which also trusts the checkpoint's remote code).

    Args:
        model_path: a local model folder (nothing is downloaded).
        trust_remote_code: run the checkpoint's own modeling code (needed by MOSS-VL-Realtime).
        device: ``cpu`` (default), ``cuda`` or ``auto``.
        dtype: ``auto`` (the checkpoint's), ``float32``, ``bfloat16`` or ``float16``.
        frame_template: the frame text with ``{ts}`` and ``<|image|>``; default: the MOSS timestamp wrapper.
        max_context_tokens: the context bound of incremental sessions.
        model, processor: already-built objects (tests, embedding); ``load`` then only checks them.
    """

    def __init__(self, model_path: str | None = None, *, trust_remote_code: bool = False, device: str = "cpu",
                 dtype: str = "auto", frame_template: str | None = None, max_context_tokens: int = 8192,
                 model: Any = None, processor: Any = None) -> None:
        super().__init__()
        if model_path is None and model is None:
            raise ValueError("TransformersVLMEngine needs a model folder or a model object")
        self.model_path = model_path
        self.trust_remote_code = trust_remote_code
        self.device = device
        self.dtype = dtype
        self.frame_template = frame_template
        self.max_context_tokens = max_context_tokens
        self.model = model
        self.processor = processor
        self.native = False

    def load(self, progress: Callable[[str], None]) -> None:
        if self.model is None:
            self._load_from_folder(progress)
        if self.processor is None:
            raise ValueError("a model object needs its processor")
        self.native = callable(getattr(self.model, "create_realtime_session", None))
        progress(f"ready ({type(self.model).__name__}, "
                 f"{'its own realtime session' if self.native else 'incremental decoding'})")
        self.loaded = True

    def _load_from_folder(self, progress: Callable[[str], None]) -> None:
        import torch
        import transformers

        path = self.model_path
        assert path is not None
        common = {"local_files_only": True, "trust_remote_code": self.trust_remote_code}
        progress(f"loading the processor from {path}")
        self.processor = transformers.AutoProcessor.from_pretrained(path, **common)
        dtype = "auto" if self.dtype == "auto" else getattr(torch, self.dtype)
        kwargs: dict[str, Any] = {**common, "dtype": dtype}
        if self.device == "auto":
            kwargs["device_map"] = "auto"
        progress(f"loading the model from {path}")
        errors = []
        for auto in ("AutoModelForImageTextToText", "AutoModelForCausalLM"):
            try:
                self.model = getattr(transformers, auto).from_pretrained(path, **kwargs)
                break
            except (ValueError, KeyError, OSError) as exc:
                errors.append(f"{auto}: {exc}")
        else:
            raise ValueError(f"cannot load a vision-language model from {path}: " + "; ".join(errors))
        if self.device not in ("cpu", "auto"):
            self.model.to(self.device)
        self.model.eval()

    def _open(self, options: SessionOptions, release: Callable[[], None]) -> VisionSession:
        if self.native:
            inner = self.model.create_realtime_session(
                self.processor, initial_prompt=options.initial_prompt, system_prompt=options.system_prompt,
                frame_queue_size=options.frame_queue_size, max_tokens_per_turn=options.max_tokens_per_turn,
                max_new_tokens=options.max_new_tokens)
            return MossNativeSession(inner, on_close=release)
        source = TransformersTokenSource(self.model, self.processor, frame_template=self.frame_template,
                                         max_context_tokens=self.max_context_tokens)
        return RealtimeVisionSession(
            source, initial_prompt=options.initial_prompt, system_prompt=options.system_prompt,
            frame_queue_size=options.frame_queue_size, max_tokens_per_turn=options.max_tokens_per_turn,
            max_new_tokens=options.max_new_tokens, on_close=release, name="vision-transformers")

    def describe(self) -> dict[str, Any]:
        return {"backend": "transformers", "model": self.model_path or type(self.model).__name__,
                "native_session": self.native}

    def close(self) -> None:
        self.model = None if self.model_path else self.model
        super().close()
