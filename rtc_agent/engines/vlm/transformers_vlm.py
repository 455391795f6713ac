"""Transformers image-text-to-text models as realtime vision backends.

:class:`TransformersVLMEngine` loads a model folder with ``AutoProcessor`` and ``AutoModelForImageTextToText`` (or
``AutoModelForCausalLM``), from local files only: nothing is downloaded at run time.

- A model that exposes ``create_realtime_session`` (MOSS-VL-Realtime, loaded with ``trust_remote_code``) runs
  its own reference session; :class:`MossNativeSession` adapts it to this project's session API (numpy frames
  become PIL images, raw output chunks become :class:`~rtc_agent.apps.vision_session.VisionOutput` items).
- Any other model is driven incrementally by :class:`TransformersTokenSource` behind
  :class:`~rtc_agent.apps.vision_session.RealtimeVisionSession`: one KV cache per session, each drain of frames
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

import collections
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rtc_agent.apps.vision_session import (
    ELLIPSIS,
    IMAGE_PLACEHOLDER,
    SILENCE,
    ChatFormat,
    ChunkParser,
    MossChatFormat,
    RealtimeVisionSession,
    Segment,
    SessionOptions,
    VisionSession,
    VisionSessionBase,
)
from rtc_agent.engines.vlm import VLMEngine

log = logging.getLogger(__name__)

__all__ = ["MossNativeSession", "TemplateChatFormat", "TransformersTokenSource", "TransformersVLMEngine"]

END_OF_TURN_TOKENS = ("<end_of_utterance>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<end_of_turn>",
                      "</s>", "<|end|>")
_MARK = "MARKER7f3a"


def _to_pil(image: Any) -> Any:
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        arr = np.clip(arr, 0, 255).astype(np.uint8)
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    return Image.fromarray(np.ascontiguousarray(arr[..., :3]))


class TemplateChatFormat(ChatFormat):
    """The turn structure of a model's own chat template, for models without a silence token (module docstring).

    Built from ``render(messages, add_generation_prompt) -> str`` by rendering marker conversations: ``prefix``
    (up to the first user message's content, with ``{system}``), ``user_close`` (the user turn's end and the
    generation prompt) and ``switch`` (the assistant turn's end and the next user turn's opening).
    """

    silence_text = ""  # no silence token to insert

    def __init__(self, render: Callable[[list[dict[str, Any]], bool], str], image_token: str,
                 decode_token: Callable[[int], str]) -> None:
        self.image_placeholder = image_token
        self._decode_token = decode_token
        sys_m, user_m, asst_m, next_m = (f"S{_MARK}", f"U{_MARK}", f"A{_MARK}", f"N{_MARK}")

        def msg(role: str, text: str) -> dict[str, Any]:
            return {"role": role, "content": [{"type": "text", "text": text}]}

        try:
            full = render([msg("system", sys_m), msg("user", user_m), msg("assistant", asst_m), msg("user", next_m)],
                          True)
            self.has_system = sys_m in full
        except Exception:  # templates that reject a system turn
            full = render([msg("user", user_m), msg("assistant", asst_m), msg("user", next_m)], True)
            self.has_system = False
        if not all(m in full for m in (user_m, asst_m, next_m)):
            raise ValueError("the chat template does not render plain text messages")
        u, a, n = full.index(user_m), full.index(asst_m), full.index(next_m)
        self.prefix = full[:u].replace(sys_m, "{system}")
        self.switch = full[a + len(asst_m):n]
        # the user turn's end and the assistant opener, as the generation prompt writes them
        first = render(([msg("system", sys_m)] if self.has_system else []) + [msg("user", user_m)], True)
        self.user_close = first[first.index(user_m) + len(user_m):]
        self.state = "user"  # the context ends inside the user turn
        self._end_text = ""

    def initial(self, system_prompt: str, initial_prompt: str) -> str:
        self.state = "user"
        return self.prefix.replace("{system}", system_prompt) + initial_prompt

    def segment(self, prompts: Sequence[str], timestamps: Sequence[float]) -> str:
        frames = "".join(self.frame(ts) for ts in timestamps)
        asked = "".join(("\n" if frames or i else "") + p for i, p in enumerate(prompts))
        if self.state == "user":
            text = frames + asked + self.user_close
        elif self.state == "closed":  # the model ended its turn itself: do not repeat its end token
            head = self.switch
            if self._end_text and head.startswith(self._end_text):
                head = head[len(self._end_text):]
            text = head + frames + asked + self.user_close
        elif prompts:  # mid-answer: a prompt closes the assistant turn
            text = self.switch + frames + asked + self.user_close
        else:  # mid-answer frames go into the context as they come (the reference's way)
            return frames
        self.state = "assistant"
        return text

    def generated(self, token_id: int, is_silence: bool) -> None:
        if is_silence:
            self.state = "closed"
            self._end_text = self._decode_token(token_id)


class TransformersTokenSource:
    """A :class:`~rtc_agent.apps.vision_session.TokenSource` over a transformers model and processor.

    Greedy decoding by default (``temperature > 0`` samples). Not thread-safe: the session's loop thread is its
    only caller.
    """

    def __init__(self, model: Any, processor: Any, *, frame_template: str | None = None,
                 max_context_tokens: int = 8192, temperature: float = 0.0, seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.max_context_tokens = max_context_tokens
        self.temperature = temperature
        self.generator = torch.Generator().manual_seed(seed)
        self.image_token = getattr(processor, "image_token", None) or "<image>"
        vocab = self.tokenizer.get_vocab()
        silence = vocab.get(SILENCE)
        self.moss_format = silence is not None
        if self.moss_format:
            fmt: ChatFormat = MossChatFormat()
            fmt.image_placeholder = self.image_token
            self.silence_ids = frozenset({silence})
            self.wait_for_input_first = False
        else:
            fmt = TemplateChatFormat(self._render, self.image_token, lambda i: self.tokenizer.decode([i]))
            self.silence_ids = frozenset(self._end_of_turn_ids(vocab))
            if not self.silence_ids:
                raise ValueError("the model has neither <|silence|> nor an end-of-turn token to stand for it")
            self.wait_for_input_first = True
        if frame_template is not None:
            fmt.frame = lambda ts: frame_template.format(ts=ts).replace(IMAGE_PLACEHOLDER, self.image_token)  # type: ignore[method-assign]
        self.chat_format = fmt
        suppress = {vocab[t] for t in (ELLIPSIS, self.image_token) if t in vocab}
        suppress |= {i for t, i in vocab.items() if t in ("<fake_token_around_image>", "<global-img>",
                                                          "<|image_pad|>", "<|video_pad|>")}
        self.suppress_ids = frozenset(suppress - self.silence_ids)
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._logits_to_keep = "logits_to_keep" in params
        inner = getattr(model, "model", None)
        self._rope_index = getattr(inner, "get_rope_index", None)  # 3D rotary positions (Qwen2-VL family)
        self._initial_ids: Any = None
        self._pending: list[dict[str, Any]] = []
        self._cache: Any = None
        self._length = 0
        self._next_pos = 0
        self.resets = 0

    # template helpers -------------------------------------------------------------------------------------------

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        for owner in (self.processor, self.tokenizer):
            if getattr(owner, "chat_template", None):
                return str(owner.apply_chat_template(messages, tokenize=False,
                                                     add_generation_prompt=add_generation_prompt))
        # no template: ChatML
        out = "".join(f"<|im_start|>{m['role']}\n{m['content'][0]['text']}<|im_end|>\n" for m in messages)
        return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def _end_of_turn_ids(self, vocab: dict[str, int]) -> set[int]:
        ids: set[int] = set()
        for source in (getattr(self.tokenizer, "eos_token_id", None),
                       getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif isinstance(source, list | tuple):
                ids.update(i for i in source if isinstance(i, int))
        ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
        return ids

    # TokenSource ------------------------------------------------------------------------------------------------

    def begin(self, system_prompt: str, initial_prompt: str) -> None:
        if isinstance(self.chat_format, TemplateChatFormat):
            text = self.chat_format.initial(system_prompt, initial_prompt)
        else:
            messages = [{"role": "system", "content": [{"type": "text", "text": system_prompt}]},
                        {"role": "user", "content": [{"type": "text", "text": initial_prompt}]}]
            text = self._render(messages, True)
        self._initial_ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        self._reset()

    def _reset(self) -> None:
        self._cache = None
        self._length = 0
        self._next_pos = 0
        self._pending = [{"input_ids": self._initial_ids}]

    def feed(self, segment: Segment) -> None:
        if segment.images:
            batch = self.processor(text=segment.text, images=[_to_pil(img) for img in segment.images],
                                   return_tensors="pt", add_special_tokens=False)
            chunk = {k: v for k, v in batch.items() if k != "attention_mask"}
        elif segment.text:
            chunk = {"input_ids": self.tokenizer(segment.text, add_special_tokens=False,
                                                 return_tensors="pt")["input_ids"]}
        else:
            return
        new = sum(int(c["input_ids"].shape[1]) for c in self._pending) + int(chunk["input_ids"].shape[1])
        if self._length + new > self.max_context_tokens:
            log.info("vision context full (%d tokens): starting again from the initial prompt", self._length)
            self.resets += 1
            self._reset()
        self._pending.append(chunk)

    def _merge(self, chunks: list[dict[str, Any]]) -> dict[str, Any]:
        """One forward's input from the pending chunks (the generated token, a segment, maybe the prefill):
        token ids concatenated, the image tensors of the (at most one) chunk that has images, and its
        ``mm_token_type_ids`` padded with text (0) for the rest."""
        if len(chunks) == 1:
            return chunks[0]
        torch = self.torch
        merged: dict[str, Any] = {"input_ids": torch.cat([c["input_ids"] for c in chunks], dim=1)}
        with_images = [c for c in chunks if len(c) > 1]
        if len(with_images) > 1:
            raise RuntimeError("more than one image segment pending for one forward pass")
        if with_images:
            images = with_images[0]
            merged.update({k: v for k, v in images.items() if k not in ("input_ids", "mm_token_type_ids")})
            if "mm_token_type_ids" in images:
                merged["mm_token_type_ids"] = torch.cat(
                    [c.get("mm_token_type_ids", torch.zeros_like(c["input_ids"])) for c in chunks], dim=1)
        return merged

    def _positions(self, chunk: dict[str, Any]) -> Any:
        """3D rotary positions of a chunk appended after ``self._next_pos`` (models with ``get_rope_index``)."""
        torch = self.torch
        ids = chunk["input_ids"]
        if "image_grid_thw" in chunk:
            kwargs = {k: chunk[k] for k in ("image_grid_thw", "mm_token_type_ids") if k in chunk}
            pos, _ = self._rope_index(ids, **kwargs)
            pos = pos + self._next_pos
        else:
            pos = torch.arange(ids.shape[1]).view(1, 1, -1).expand(3, 1, -1) + self._next_pos
        self._next_pos = int(pos.max()) + 1
        return pos

    def _forward(self, chunk: dict[str, Any]) -> Any:
        kwargs = dict(chunk)
        kwargs[self._cache_kw] = self._cache
        kwargs["use_cache"] = True
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = 1
        if self._rope_index is not None:
            kwargs["position_ids"] = self._positions(chunk)
        out = self.model(**kwargs)
        cache = getattr(out, "cache", None)
        self._cache = cache if cache is not None else getattr(out, "past_key_values", None)
        self._length += int(chunk["input_ids"].shape[1])
        return out.logits[:, -1, :]

    def next_token(self, suppress: frozenset[int]) -> int:
        torch = self.torch
        with torch.inference_mode():
            pending, self._pending = self._pending, []
            if not pending:
                raise RuntimeError("next_token without anything new to read (no prefill, no generated token)")
            logits = self._forward(self._merge(pending))
            scores = logits[0].float()
            if suppress:
                scores[[i for i in suppress if i < scores.shape[0]]] = float("-inf")
            if self.temperature > 0:
                probs = torch.softmax(scores / self.temperature, dim=-1)
                token = int(torch.multinomial(probs, 1, generator=self.generator).item())
            else:
                token = int(torch.argmax(scores).item())
        self._pending.append({"input_ids": torch.tensor([[token]])})
        return token

    def decode(self, ids: Sequence[int]) -> str:
        skip = not self.moss_format  # a generic model's stray special tokens are not commentary
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip, clean_up_tokenization_spaces=False))

    @property
    def context_tokens(self) -> int:
        """Tokens in the KV cache."""
        return self._length

    def close(self) -> None:
        self._cache = None
        self._pending = []


class MossNativeSession(VisionSessionBase):
    """The model's own ``create_realtime_session`` session (MOSS-VL-Realtime) behind this project's API.

    Frames are checked (non-decreasing timestamps, the reference's message), converted to PIL images and pushed
    with explicit timestamps; a pump thread turns the reference's raw output strings into
    :class:`~rtc_agent.apps.vision_session.VisionOutput` items (``frame_ts`` is the newest frame pushed).
    """

    def __init__(self, inner: Any, *, on_close: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self._on_close = on_close
        self._parser = ChunkParser()
        self._prompts: collections.deque[str] = collections.deque()
        self._frame_ts: float | None = None
        self._pump: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @property
    def active(self) -> bool:
        return bool(self.inner.active) and not self._done.is_set()

    @property
    def pending_frames(self) -> int:
        return int(self.inner.pending_frames)

    def start(self) -> MossNativeSession:
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("Cannot start a closed realtime session")
            if self._pump is not None:
                return self
            self._started_at = self._clock()
            self.inner.start()
            self._pump = threading.Thread(target=self._run, name="vision-moss-native", daemon=True)
            self._pump.start()
        return self

    def push_frame(self, image: Any, timestamp: float | None = None, *, drop_oldest: bool = True) -> bool:
        self._admit_frame(image, self._pump is not None)
        ts = self._frame_timestamp(timestamp)
        dropped = bool(self.inner.push_frame(_to_pil(image), timestamp=ts, drop_oldest=drop_oldest))
        self._frame_ts = ts
        self.counters["frames_pushed"] += 1
        self.counters["frames_dropped"] += int(dropped)
        return dropped

    def push_prompt(self, prompt: str) -> None:
        self._check_open()
        prompt = self._check_prompt(prompt)
        if self._pump is None:
            self.start()
        self._prompts.append(prompt)
        self.inner.push_prompt(prompt)

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool:
        self._check_open()
        prompt = self._check_prompt(prompt)
        if self._pump is None:
            self.start()
        ts = self._frame_timestamp(timestamp)
        self._prompts.append(prompt)
        dropped = bool(self.inner.push_prompt_frame(prompt, _to_pil(image), ts, drop_oldest=drop_oldest))
        self._frame_ts = ts
        return dropped

    def _run(self) -> None:
        try:
            while True:
                chunk = self.inner.poll_output(timeout=0.1)
                if chunk is None:
                    if not self.inner.active:
                        break
                    continue
                for piece, text in self._parser.feed(str(chunk)):
                    self._piece(piece, text)
            for piece, text in self._parser.flush():
                self._piece(piece, text)
            self._put(self._rounds.end(self._frame_ts), self._stop)
        except Exception as exc:
            self._error = exc
            self._put(self._rounds.end(self._frame_ts, error=f"{type(exc).__name__}: {exc}"), self._stop)
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()
            self._done.set()
            self._notify()

    def _piece(self, piece: str, text: str) -> None:
        self._put_piece(piece, text, self._frame_ts, self._prompts, self._stop)

    def close(self, timeout: float | None = 5.0) -> None:
        self._closed.set()
        close_error: BaseException | None = None
        try:
            self.inner.close(timeout)
        except TimeoutError:
            raise
        except Exception as exc:  # the reference re-raises a generation failure on close
            close_error = exc
        self._stop.set()
        pump = self._pump
        if pump is None:
            if not self._done.is_set():
                on_close, self._on_close = self._on_close, None
                if on_close is not None:
                    on_close()
                self._done.set()
            return
        pump.join(timeout=timeout)
        if pump.is_alive():
            raise TimeoutError("the realtime session's output pump did not stop before the timeout")
        if close_error is not None and self._error is None:
            self._error = close_error
        self._raise_if_failed()


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
