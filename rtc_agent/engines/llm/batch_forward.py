"""Forward passes over several left-padded sequences at once, each with its own KV cache: what
:mod:`.batch_decode` runs one step of a batched greedy decode with.

Both take the rows' left padding at construction (``pads[b]``: how many leading columns of row ``b`` are not
tokens) and keep a cache of every column fed so far. :meth:`forward` takes the next ``[rows, n]`` token ids (the
padded prompts first, then one token per row per step) and returns the logits of each row's last column (float32,
``[rows, vocab]``). A padding column is never attended by a real token, and a token's position is its index among
its row's real tokens (column minus padding), so each row computes what it would alone, up to float rounding.

- :class:`LlamaBatchForward`: the lean path for Llama-family models (the modules
  :class:`~rtc_agent.engines.llm.llama_decoder.LlamaDecoder` runs, with a ``[rows, kv_heads, capacity, head_dim]``
  cache allocated once for ``capacity`` columns; a forward past it raises ``ValueError``). A row's first tokens
  can be given instead of computed (:meth:`LlamaBatchForward.seed`, from :meth:`LlamaBatchForward.row_cache` of
  an earlier batch; :mod:`.row_cache`): set ``length`` to the first column to compute, which no row may have an
  unseeded real token before.
- :class:`TransformersBatchForward`: any causal LM through its own forward (attention mask, position ids, the
  model's KV cache object).

A row whose decode has ended can leave the batch (:meth:`BatchForward.drop_rows`, where ``drops_rows``: the lean
path), so the steps of the rows still decoding no longer compute it.

``before_layer`` (lean path) is called before every layer, like ``LlamaDecoder.before_layer``. Neither is
thread-safe; both are made per batch and dropped after it (the engine's own prefix cache is left untouched).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rtc_agent.engines.llm.attention import attend
from rtc_agent.engines.llm.llama_decoder import _rotate_half, take_llama_parts

__all__ = ["BatchForward", "LlamaBatchForward", "TransformersBatchForward"]


class BatchForward:
    """The contract of a batched forward (see the module docstring); subclasses implement :meth:`forward`, and
    those that set ``drops_rows`` :meth:`drop_rows`."""

    #: whether :meth:`drop_rows` can take rows out of the batch
    drops_rows = False

    def __init__(self, pads: Sequence[int]) -> None:
        import torch

        self._torch = torch
        self.rows = len(pads)
        self.pads = torch.tensor(list(pads), dtype=torch.long)  # [rows]
        self.length = 0  # columns fed so far
        self.before_layer: Callable[[], object] = lambda: None

    def positions(self, start: int, end: int) -> Any:
        """``[rows, end - start]`` position ids of columns ``start .. end`` (0 for padding columns)."""
        torch = self._torch
        return (torch.arange(start, end).unsqueeze(0) - self.pads.unsqueeze(1)).clamp(min=0)

    def key_mask(self, end: int) -> Any:
        """``[rows, end]``: True where a column holds a real token."""
        return self._torch.arange(end).unsqueeze(0) >= self.pads.unsqueeze(1)

    def forward(self, ids: Any) -> Any:
        """The last column's logits of each row (float32, ``[rows, vocab]``) after appending ``ids``."""
        raise NotImplementedError

    def drop_rows(self, gone: Sequence[int]) -> None:
        """Take the rows at indices ``gone`` out of the batch (with their caches): later forwards take and return
        the other rows, in their order, and ``pads`` and :meth:`row_cache`-style indices count only them. At least
        one row must stay."""
        raise NotImplementedError(f"{type(self).__name__} keeps every row")

    def _keep_rows(self, gone: Sequence[int]) -> Any:
        """Check ``gone``, shrink ``rows`` and ``pads`` to the other rows and return their indices (a tensor)."""
        leaving = set(gone)
        if not leaving <= set(range(self.rows)) or len(leaving) >= self.rows:
            raise ValueError(f"cannot drop rows {sorted(leaving)} of a batch of {self.rows}")
        index = self._torch.tensor([r for r in range(self.rows) if r not in leaving], dtype=self._torch.long)
        self.pads = self.pads[index]
        self.rows = int(index.numel())
        return index


class LlamaBatchForward(BatchForward):
    """The lean batched forward for models :func:`~rtc_agent.engines.llm.llama_decoder.unsupported_reason`
    accepts; ``capacity``: the most columns it will be fed (padded prompt plus new tokens)."""

    drops_rows = True

    def __init__(self, model: Any, pads: Sequence[int], *, capacity: int) -> None:
        super().__init__(pads)
        take_llama_parts(self, model, "LlamaBatchForward")
        torch = self._torch
        base = model.model
        self.dtype = self.embed.weight.dtype
        self.capacity = int(capacity)
        shape = (self.rows, self.kv_heads, self.capacity, self.head_dim)
        self._keys = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        self._values = [torch.zeros(shape, dtype=self.dtype) for _ in self.layers]
        with torch.inference_mode():
            probe = torch.zeros(1, 1, self.head_dim, dtype=torch.float32)
            cos, sin = base.rotary_emb(probe, torch.arange(self.capacity).unsqueeze(0))
        self._cos, self._sin = cos[0].to(self.dtype), sin[0].to(self.dtype)  # [capacity, head_dim]

    def drop_rows(self, gone: Sequence[int]) -> None:
        index = self._keep_rows(gone)
        self._keys = [k.index_select(0, index) for k in self._keys]
        self._values = [v.index_select(0, index) for v in self._values]

    def seed(self, row: int, keys: list[Any], values: list[Any], n: int) -> None:
        """Put the first ``n`` tokens' keys and values of ``row`` in place (per layer ``[kv_heads, >= n,
        head_dim]``, as :meth:`row_cache` returns them)."""
        start = int(self.pads[row])
        for kept, cache in ((keys, self._keys), (values, self._values)):
            for layer, tensor in zip(cache, kept, strict=True):
                layer[row, :, start:start + n] = tensor[:, :n]

    def row_cache(self, row: int, n: int) -> tuple[list[Any], list[Any]]:
        """Copies of the keys and values of ``row``'s first ``n`` real tokens, per layer."""
        start = int(self.pads[row])
        return ([k[row, :, start:start + n].clone() for k in self._keys],
                [v[row, :, start:start + n].clone() for v in self._values])

    def forward(self, ids: Any) -> Any:
        torch = self._torch
        F = torch.nn.functional
        rows, n = int(ids.shape[0]), int(ids.shape[1])
        start, end = self.length, self.length + n
        if end > self.capacity:
            raise ValueError(f"{end} columns do not fit the batch's cache of {self.capacity}")
        positions = self.positions(start, end)  # [rows, n]
        cos = self._cos[positions].unsqueeze(1)  # [rows, 1, n, d]: broadcast over heads
        sin = self._sin[positions].unsqueeze(1)
        # query column start + i sees the real columns up to itself, and always itself (a padding query must
        # not see nothing: its softmax would be NaN, and NaN keys and values poison even masked-out products)
        query = torch.arange(start, end).view(1, n, 1)
        column = torch.arange(end).view(1, 1, end)
        mask = ((column <= query) & self.key_mask(end).unsqueeze(1)) | (column == query)
        mask = mask.unsqueeze(1)  # [rows, 1, n, end]
        hidden = self.embed(ids)
        for index, layer in enumerate(self.layers):
            self.before_layer()
            attn, mlp = layer.self_attn, layer.mlp
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(rows, n, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(rows, n, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(rows, n, self.kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(torch, q) * sin
            k = k * cos + _rotate_half(torch, k) * sin
            keys, values = self._keys[index], self._values[index]
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            out = attend(torch, q, keys[:, :, :end], values[:, :, :end], mask)
            hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(rows, n, self.heads * self.head_dim))
            x = layer.post_attention_layernorm(hidden)
            hidden = hidden + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
        self.length = end
        return self.head(self.final_norm(hidden[:, -1:]))[:, -1].float()


class TransformersBatchForward(BatchForward):
    """Any causal LM through its own forward: ``cache_arg`` names its KV cache argument and output field
    (``past_key_values``, or ``cache`` in transformers 5.x); ``options`` are extra forward arguments (e.g.
    ``logits_to_keep=1``)."""

    def __init__(self, model: Any, pads: Sequence[int], *, cache_arg: str = "past_key_values",
                 options: dict[str, Any] | None = None) -> None:
        super().__init__(pads)
        self.model = model
        self.cache_arg = cache_arg
        self.options = dict(options or {})
        self._past: Any = None

    def forward(self, ids: Any) -> Any:
        n = int(ids.shape[1])
        start, end = self.length, self.length + n
        out = self.model(input_ids=ids, attention_mask=self.key_mask(end).long(),
                         position_ids=self.positions(start, end), use_cache=True,
                         **{self.cache_arg: self._past}, **self.options)
        self._past = getattr(out, self.cache_arg, None)
        self.length = end
        return out.logits[:, -1, :].float()
