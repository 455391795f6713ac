"""Grouped-query attention of the lean decoders (:mod:`~rtc_agent.engines.llm.llama_decoder` and
:class:`~rtc_agent.engines.llm.batch_forward.LlamaBatchForward`) over their preallocated key and value caches.

:func:`attend` returns what ``torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
enable_gqa=True)`` returns (up to float rounding), choosing the computation by the number of queries:

- a decode step (one query per row) is two small matrix products and a softmax, in float32. torch's fused CPU
  kernel is built for many queries: with one query and ``bfloat16`` caches it took 7-11 ms per token (24 layers of
  Qwen2.5-0.5B, 300 cached positions, one row, 2 threads of an AMD EPYC with AVX-512) and 23-47 ms for three rows
  at 300-600 positions, against 1.6 and 3.6-5.3 ms so: a third of a translation's decode step, growing with the
  context. In float32 the two are even; the products in float32 keep the fused kernel's accuracy (its bf16
  inputs, float32 accumulation; the result rounded to the cache's type).
- a prompt (several queries) keeps the fused kernel, which is faster there (three rows of 20 new tokens: 16 ms
  against 33 ms).
"""

from __future__ import annotations

from typing import Any

__all__ = ["attend"]


def attend(torch: Any, q: Any, keys: Any, values: Any, mask: Any | None) -> Any:
    """Attention of ``q`` (``[rows, heads, n, d]``) over ``keys``/``values`` (``[rows, kv_heads, end, d]``, ``heads``
    a multiple of ``kv_heads``; query head ``h`` reads key head ``h // (heads // kv_heads)``); ``mask``: None (every
    key) or a boolean ``[rows or 1, 1, n, end]`` (True: attend), every query seeing at least one key. Returns
    ``[rows, heads, n, d]`` in ``q``'s dtype."""
    rows, heads, n, dim = (int(s) for s in q.shape)
    kv_heads, end = int(keys.shape[1]), int(keys.shape[2])
    if n != 1:
        return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                                enable_gqa=kv_heads != heads)
    group = heads // kv_heads
    grouped = q.reshape(rows, kv_heads, group, dim).float()  # the query heads that share a key head
    scores = torch.matmul(grouped, keys.float().transpose(-1, -2)) * dim ** -0.5  # [rows, kv_heads, group, end]
    if mask is not None:
        scores = scores.masked_fill(~mask.reshape(mask.shape[0], 1, 1, end), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, values.float()).to(q.dtype).reshape(rows, heads, 1, dim)
