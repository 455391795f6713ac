"""``LlamaDecoder``: a lean forward pass over a transformers Llama-family model, with its own preallocated KV cache.

Why: on a small CPU a token of SmolLM2-135M spends about as long in transformers' per-layer Python (mask and cache
bookkeeping, output objects, hooks) as in its matrix products. This decoder runs the same modules (the model's
own projections, norms' weights, rotary tables and output head, so quantized layers and biases work unchanged)
in a short loop, and writes keys and values into fixed tensors instead of growing a cache by concatenation.

Contract:

- :func:`unsupported_reason` says why a model cannot use it (None when it can): the architecture must be a
  pre-norm decoder of the Llama family (``llama``, ``mistral`` without a sliding window, ``qwen2`` without one)
  with SiLU-gated MLPs. Anything else keeps transformers' forward.
- :meth:`LlamaDecoder.forward` takes the next token ids, appends their keys and values at positions
  ``length .. length + n`` and returns the logits of the last one (float32, ``[vocab]``), the same as the
  model's forward with a KV cache (tested against it on a model built from a config).
- :meth:`LlamaDecoder.crop` keeps a prefix of the cache (the engine's prefix cache), :meth:`reset` empties it.
- The cache grows by doubling up to ``max_length``; a forward past it raises ``ValueError``.
- ``before_layer`` is called before every layer (the engine's checkpoint, to step aside for other engines).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtc_agent.engines.llm.attention import attend

_FAMILIES = ("llama", "mistral", "qwen2")


def decoder_layers(model: Any) -> list[Any]:
    """The transformer blocks of a causal LM of any family (the longest ``ModuleList`` in it), or ``[]``."""
    import torch

    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def take_llama_parts(owner: Any, model: Any, who: str) -> None:
    """Set on ``owner`` what a forward over a Llama-family ``model`` reads: ``embed``, ``layers``, ``final_norm``,
    ``head``, ``heads``, ``kv_heads``, ``head_dim``; ValueError naming ``who`` when the model is not one
    (:func:`unsupported_reason`)."""
    reason = unsupported_reason(model)
    if reason is not None:
        raise ValueError(f"{who} cannot run this model: {reason}")
    config, base = model.config, model.model
    owner.embed = base.embed_tokens
    owner.layers = list(base.layers)
    owner.final_norm = base.norm
    owner.head = model.get_output_embeddings()
    owner.heads = int(config.num_attention_heads)
    owner.kv_heads = int(getattr(config, "num_key_value_heads", None) or owner.heads)
    owner.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // owner.heads)


def unsupported_reason(model: Any) -> str | None:
    """None when :class:`LlamaDecoder` can run ``model``, else a short reason."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in _FAMILIES:
        return f"model type {kind!r} is not one of {', '.join(_FAMILIES)}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} is not silu"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", kind == "mistral"):
        return "sliding-window attention"
    base = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if base is None or not all(hasattr(base, name) for name in needed) or model.get_output_embeddings() is None:
        return "unexpected module layout"
    for layer in base.layers:
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if attn is None or mlp is None or not all(
                hasattr(attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")) or not all(
                hasattr(mlp, p) for p in ("gate_proj", "up_proj", "down_proj")):
            return "unexpected layer layout"
    return None


class LlamaDecoder:
    """See the module docstring. Not thread-safe: one generation at a time (the engine's concurrency is 1)."""

    def __init__(self, model: Any, *, max_length: int, initial_length: int = 512) -> None:
        import torch

        take_llama_parts(self, model, "LlamaDecoder")
        self._torch = torch
        config = model.config
        base = model.model
        self.eps = float(getattr(config, "rms_norm_eps", 1e-6))
        self.max_length = int(max_length)
        self.dtype = self.embed.weight.dtype
        self.length = 0
        self.before_layer: Callable[[], object] = lambda: None
        self._rotary = base.rotary_emb
        self._capacity = 0
        self._keys: list[Any] = []
        self._values: list[Any] = []
        self._cos: Any = None
        self._sin: Any = None
        self._grow(min(self.max_length, max(1, initial_length)))

    # --- cache ---

    def reset(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (a negative ``length`` drops that many from the end)."""
        keep = self.length + length if length < 0 else length
        self.length = max(0, min(self.length, keep))

    def _grow(self, capacity: int) -> None:
        torch = self._torch
        shape = (1, self.kv_heads, capacity, self.head_dim)
        keys = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        values = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        for new, old in ((keys, self._keys), (values, self._values)):
            for n, o in zip(new, old, strict=False):
                n[:, :, : self.length] = o[:, :, : self.length]
        self._keys, self._values, self._capacity = keys, values, capacity
        with torch.inference_mode():
            probe = torch.zeros(1, 1, self.head_dim, dtype=torch.float32)
            cos, sin = self._rotary(probe, torch.arange(capacity).unsqueeze(0))
        self._cos, self._sin = cos[0].to(self.dtype), sin[0].to(self.dtype)  # [capacity, head_dim]

    # --- forward ---

    def forward(self, ids: Any) -> Any:
        """Logits (float32, ``[vocab]``) after appending ``ids`` (a ``[1, n]`` long tensor) to the cache."""
        torch = self._torch
        n = int(ids.shape[-1])
        start, end = self.length, self.length + n
        if end > self.max_length:
            raise ValueError(f"{end} tokens do not fit the model's context of {self.max_length}")
        if end > self._capacity:
            self._grow(min(self.max_length, max(end, 2 * self._capacity)))
        F = torch.nn.functional
        cos = self._cos[start:end].unsqueeze(0)  # [1, n, d]: broadcast over heads
        sin = self._sin[start:end].unsqueeze(0)
        mask = None
        if n > 1:  # query i sees keys up to start + i
            mask = torch.arange(end).unsqueeze(0) <= torch.arange(start, end).unsqueeze(1)
        hidden = self.embed(ids)
        for index, layer in enumerate(self.layers):
            self.before_layer()
            attn, mlp = layer.self_attn, layer.mlp
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(1, n, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(1, n, self.kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(torch, q) * sin
            k = k * cos + _rotate_half(torch, k) * sin
            keys, values = self._keys[index], self._values[index]
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            out = attend(torch, q, keys[:, :, :end], values[:, :, :end], mask)
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(1, n, self.heads * self.head_dim))
            x = layer.post_attention_layernorm(hidden)
            hidden = hidden + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
        self.length = end
        last = self.final_norm(hidden[:, -1:])
        return self.head(last)[0, -1].float()


def _rotate_half(torch: Any, x: Any) -> Any:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
