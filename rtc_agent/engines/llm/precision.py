"""Numeric precision of the embedded LLM on the CPU.

Generating one token multiplies a single row by every weight matrix: the time goes to reading the weights from
memory, so smaller weights are faster. A long prompt multiplies many rows at once and wants fast dense kernels
instead. ``DecodeQuantLinear`` serves both: dense ``bfloat16`` weights for long prompts, and a weight-only
quantized copy for short inputs (decode steps, and with int4 the few new tokens of a conversation's next turn).

Precisions (``--llm-precision``):

- ``float32``: the converted weights as they are; works on every CPU.
- ``bfloat16``: half the memory traffic; needs a CPU with native bf16 (AVX512-BF16 or AMX), else it is slow.
- ``int8``: ``bfloat16`` plus per-output-channel int8 weights (``torch._weight_int8pack_mm``) for decode steps.
- ``int4``: ``bfloat16`` plus 4-bit weights in groups of 32 along the input (``_weight_int4pack_mm_for_cpu``,
  scale and zero per group) for inputs of up to ``QUANT_ROWS["int4"]`` rows. The packaged SmolLM2 is a Q4_1
  GGUF, whose blocks are exactly such groups (``w = d * q + m``, ``q`` in 0..15, the block's minimum and maximum
  on the grid), so int4 reproduces its weights up to the bfloat16 rounding of the scales. Layers whose shape the
  kernel does not take (outputs not a multiple of 16, inputs not of 32) get int8. The output head (tied to the
  token embedding, which is not on a 4-bit grid) gets int4 with a rescore: the ``HEAD_RESCORE_TOP`` best tokens
  of the int4 product are computed again from the dense weights, so a greedy step picks the dense head's token
  whenever it is among them (the rest of the row keeps the int4 estimate, which sampling reads). It is the largest
  matrix of a small model (Qwen2.5-0.5B: 151936x896): one step's head took 9.2 ms in int8 against 4.4 ms so (one
  row; 12.5 against 7.3 ms for three; 2 threads, AMD EPYC with AVX-512), and a translation 10-20 % less time at
  the same chrF (README).
- ``auto``: ``int4`` where torch has both kernels, ``int8`` where it has only the int8 one (on a CPU with native
  bf16), else ``float32``.

Decode steps of several rows at once can take an int8 x int8 product instead (:mod:`.batch_int8`,
``llm_batch_int8``), whose cost does not grow with the rows as the weight-only kernels' does.

The quantized path always computes in ``bfloat16`` (the kernels' fast input; a short input is cast to it and the
result back). The dense weights follow the CPU: ``bfloat16`` where it has native bf16, else ``float32``
(:func:`dense_dtype`), because without it a ``bfloat16`` product of many rows is 3-4x slower than ``float32`` while
one row through the int4 kernel is still 2.8x faster than ``float32`` (2-core AMD EPYC, no AVX-512: a 4864x896
layer 0.75 ms int4 against 2.1 ms float32 and 1.3 ms bfloat16; the 151936x896 output head 33 ms int8 against
61 ms; prompts of 24 and 128 rows 9 and 28 ms float32 against 26 and 125 ms bfloat16). There ``auto`` gives int4
decode steps over float32 prompts: Qwen2.5-0.5B's token step fell from about 0.2 s (float32) to under 0.1 s.

Measured on the project's 2-core CPU (AMX): SmolLM2-135M decodes at ~39 ms per token in int8 and ~27 ms in int4;
20 new prompt tokens take ~95 ms dense and ~85 ms in int4.
"""

from __future__ import annotations

import functools
from typing import Any

from rtc_agent.config import LLM_PRECISIONS
from rtc_agent.engines.llm.batch_int8 import is_batch_step, matmul, pack

PRECISIONS = LLM_PRECISIONS
#: Inputs with at most this many rows take the quantized path; longer prompts take the dense one.
QUANT_ROWS = {"int8": 4, "int4": 24}
INT4_GROUP = 32
#: The output head's int4 logits of this many best tokens per row are computed again from the dense weights.
HEAD_RESCORE_TOP = 32
#: :func:`top_indices` searches the output head's logits in blocks of this many.
TOP_BLOCK = 128
_INT4_KERNELS = ("_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu")


def resolve_precision(precision: str, torch: Any) -> str:
    """The concrete precision for ``precision`` on this machine (``auto`` resolved; others checked)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown LLM precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        if _has_int4(torch) and _has_int8(torch):
            return "int4"
        return "int8" if _has_int8(torch) and _native_bf16(torch) else "float32"
    if precision in ("int8", "int4") and not _has_int8(torch):
        raise ValueError("this torch build has no int8 weight-only kernel: use --llm-precision bfloat16 or float32")
    if precision == "int4" and not _has_int4(torch):
        raise ValueError("this torch build has no int4 weight-only CPU kernel: use --llm-precision int8")
    return precision


def _native_bf16(torch: Any) -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _has_int8(torch: Any) -> bool:
    return hasattr(torch, "_weight_int8pack_mm")


def _has_int4(torch: Any) -> bool:
    return all(hasattr(torch.ops.aten, name) for name in _INT4_KERNELS)


def model_dtype(precision: str, torch: Any) -> Any:
    """The torch dtype the model's weights load in for a resolved ``precision``.

    Quantized precisions load float32 (the quantizer reads the exact weights) and :func:`finish_precision` casts
    the dense weights to bfloat16 afterwards.
    """
    return torch.bfloat16 if precision == "bfloat16" else torch.float32


def dense_dtype(torch: Any) -> Any:
    """The dtype of a quantized model's dense weights on this CPU (see the module docstring)."""
    return torch.bfloat16 if _native_bf16(torch) else torch.float32


def finish_precision(model: Any, precision: str, torch: Any, batch_int8: bool = False) -> Any:
    """Quantize ``model`` for ``precision`` (int8/int4) and cast its dense weights to :func:`dense_dtype`; returns
    the model. ``batch_int8``: decode steps of several rows take :mod:`.batch_int8`'s path."""
    if precision in QUANT_ROWS:
        quantize_decode_linears(model, torch, precision, batch_int8=batch_int8)
        dense = dense_dtype(torch)
        if dense != torch.float32:
            model = model.to(dense)
    return model


def quantize_decode_linears(model: Any, torch: Any, precision: str = "int8", *,
                            batch_int8: bool = False) -> dict[str, int]:
    """Give every ``nn.Linear`` of ``model`` a quantized path for short inputs (in place).

    Returns how many layers got each kind (``{"int4": n, "int8": m}``). Tied weights (SmolLM2's embedding and
    output head) stay tied: the dense path reads the same parameter. With int4 the output head also rescores its
    best tokens from the dense weights (see the module doc). ``batch_int8``: every layer also gets
    :mod:`.batch_int8`'s copy for decode steps of several rows, the output head only where it rescores (its best
    tokens then still come from the dense weights; an int8 head's 7-bit inputs would pick other tokens).
    """
    cls = _quant_linear_class()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    counts = {"int4": 0, "int8": 0}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not torch.nn.Linear:
                continue
            out_features, in_features = child.weight.shape
            bits = 4 if (precision == "int4" and out_features % 16 == 0 and in_features % INT4_GROUP == 0) else 8
            layer = cls(child, bits, rescore=HEAD_RESCORE_TOP if child is head and bits == 4 else 0)
            if batch_int8 and (child is not head or layer.rescore):  # an unrescored head keeps its 8-bit weights
                layer.batch = pack(child.weight, torch)
            setattr(parent, name, layer)
            counts[f"int{bits}"] += 1
    return counts


def top_indices(values: Any, k: int, torch: Any, block: int = TOP_BLOCK) -> Any:
    """``[rows, k]`` indices of the ``k`` largest entries of each row of ``values`` (``[rows, n]``, float, ``k <= n``):
    the set ``values.topk(k).indices`` holds, in another order (ties may pick other equal entries).

    Blockwise: the largest entry of each block of ``block`` chooses the ``k`` blocks that can hold the ``k`` largest,
    and only those are searched. A full ``topk`` allocates a buffer of ``n`` (value, index) pairs a row (2.4 MB for
    Qwen's 151936 tokens) on every call: in the engine's decode steps of three rows it took 1.5-5.5 ms (its pages
    touched anew, up to ~600 page faults a call) against 0.5 ms repeated at once; this takes 0.1 ms (2-core AMD
    EPYC with AVX-512, one thread)."""
    rows, n = values.shape
    blocks = -(-n // block)
    if blocks <= k:
        return values.topk(k, dim=-1).indices
    if blocks * block != n:
        values = torch.nn.functional.pad(values, (0, blocks * block - n), value=float("-inf"))
    grid = values.reshape(rows, blocks, block)
    chosen = grid.amax(dim=-1).topk(k, dim=-1).indices  # [rows, k]: every one of the k largest lies in these
    candidates = grid.gather(1, chosen.unsqueeze(-1).expand(rows, k, block)).reshape(rows, k * block)
    best = candidates.topk(k, dim=-1).indices
    return chosen.gather(1, best // block) * block + best % block


@functools.cache
def _quant_linear_class() -> type:
    """The module class, built on first use so that importing this module does not import torch."""
    import torch

    class DecodeQuantLinear(torch.nn.Module):
        """A linear layer with dense weights for many rows and weight-only int8 or int4 ones for a few (see the
        module doc). The quantized buffers are built from the weights as given (call before casting them). With
        ``rescore`` > 0 the quantized path computes the ``rescore`` largest outputs of each row again from the
        dense weights."""

        def __init__(self, linear: Any, bits: int, rescore: int = 0) -> None:
            super().__init__()
            self.linear = linear
            self.bits = bits
            self.rescore = min(rescore, linear.out_features)
            self.max_rows = QUANT_ROWS[f"int{bits}"]
            self.batch: Any = None  # batch_int8.pack's weight, for decode steps of several rows
            weight = linear.weight.detach().float()
            if bits == 8:
                scale = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
                self.register_buffer("packed", torch.round(weight / scale[:, None]).clamp(-127, 127)
                                     .to(torch.int8).contiguous(), persistent=False)
                self.register_buffer("scale", scale.to(torch.bfloat16).contiguous(), persistent=False)
            else:
                out_features, in_features = weight.shape
                groups = weight.reshape(out_features, in_features // INT4_GROUP, INT4_GROUP)
                low, high = groups.amin(dim=-1), groups.amax(dim=-1)
                step = ((high - low) / 15).clamp(min=1e-8)
                codes = torch.round((groups - low[..., None]) / step[..., None]).clamp(0, 15)
                self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                    codes.to(torch.int32).reshape(out_features, in_features), 8), persistent=False)
                # the kernel computes (q - 8) * scale + zero, laid out [groups, out_features, 2]
                self.register_buffer("scale", torch.stack([step.t(), (low + 8 * step).t()], dim=-1)
                                     .to(torch.bfloat16).contiguous(), persistent=False)

        @property
        def weight(self) -> Any:
            return self.linear.weight

        def forward(self, x: Any) -> Any:
            rows = x.numel() // x.shape[-1]
            batched = self.batch is not None and is_batch_step(x)
            if not batched and rows > self.max_rows:
                return self.linear(x)
            flat = x.reshape(rows, x.shape[-1])
            if batched:
                out = matmul(flat, self.batch, torch)
            else:
                short = flat.to(self.scale.dtype).contiguous()
                out = (torch._weight_int8pack_mm(short, self.packed, self.scale) if self.bits == 8 else
                       torch.ops.aten._weight_int4pack_mm_for_cpu(short, self.packed, INT4_GROUP, self.scale))
            if self.rescore:
                out = self._rescored(out.float(), flat)
            out = out.reshape(*x.shape[:-1], out.shape[-1]).to(x.dtype)
            return out if self.linear.bias is None else out + self.linear.bias

        def _rescored(self, out: Any, x: Any) -> Any:
            """``out`` (rows x outputs, float32) with each row's ``rescore`` largest entries computed again from
            the dense weights and the unquantized input ``x``."""
            top = top_indices(out, self.rescore, torch)
            exact = torch.einsum("rkd,rd->rk", self.linear.weight[top].float(), x.float())
            return out.scatter_(1, top, exact)

    return DecodeQuantLinear
