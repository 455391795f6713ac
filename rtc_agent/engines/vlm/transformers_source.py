"""A transformers model as a :class:`~rtc_agent.engines.vlm.realtime.TokenSource`: one KV cache per session, each
drain of frames and prompts appended as a segment and decoded one token at a time.

A model whose vocabulary has ``<|silence|>`` is driven in the MOSS format; any other follows its own chat template
(:class:`~rtc_agent.engines.vlm.template_format.TemplateChatFormat`) and its end-of-turn tokens stand for
``<|silence|>``. Models with 3D rotary positions (Qwen2-VL family) get their positions per appended segment from
``get_rope_index``; past ``max_context_tokens`` the history is dropped and the model starts again from its initial
prompt. Imports torch when a source is built.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

from rtc_agent.engines.vlm.chat_format import ELLIPSIS, IMAGE_PLACEHOLDER, SILENCE, ChatFormat, MossChatFormat, Segment
from rtc_agent.engines.vlm.images import to_pil
from rtc_agent.engines.vlm.template_format import TemplateChatFormat

log = logging.getLogger(__name__)

__all__ = ["END_OF_TURN_TOKENS", "TransformersTokenSource"]

END_OF_TURN_TOKENS = ("<end_of_utterance>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<end_of_turn>",
                      "</s>", "<|end|>")


class TransformersTokenSource:
    """A :class:`~rtc_agent.engines.vlm.realtime.TokenSource` over a transformers model and processor.

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
            batch = self.processor(text=segment.text, images=[to_pil(img) for img in segment.images],
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
