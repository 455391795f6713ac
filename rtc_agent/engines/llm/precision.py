"""Numeric precision of the embedded LLM on the CPU.

Generating one token multiplies a single row by every weight matrix: the time goes to reading the weights from
memory, so smaller weights are faster. Prefill multiplies many rows at once and wants fast dense kernels instead.
``DecodeInt8Linear`` serves both: dense ``bfloat16`` weights for prompts, and a per-output-channel ``int8``
copy (weight-only quantization, ``torch._weight_int8pack_mm``) for single-token steps.

Precisions (``--llm-precision``):

- ``float32``: the converted weights as they are; works on every CPU.
- ``bfloat16``: half the memory traffic; needs a CPU with native bf16 (AVX512-BF16 or AMX), else it is slow.
- ``int8``: ``bfloat16`` plus int8 weights for decode steps (per-channel scales keep a 135M model's answers
  close to float32's).
- ``auto``: ``int8`` where the CPU has native bf16 and torch has the int8 kernel, else ``float32``.
"""

from __future__ import annotations

import functools
from typing import Any

from rtc_agent.config import LLM_PRECISIONS

PRECISIONS = LLM_PRECISIONS
#: Inputs with at most this many rows take the int8 path (decode steps; a prompt takes the dense one).
DECODE_ROWS = 4


def resolve_precision(precision: str, torch: Any) -> str:
    """The concrete precision for ``precision`` on this machine (``auto`` resolved; others checked)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown LLM precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    bf16 = _native_bf16(torch)
    if precision == "auto":
        return "int8" if bf16 and hasattr(torch, "_weight_int8pack_mm") else "float32"
    if precision == "int8" and not hasattr(torch, "_weight_int8pack_mm"):
        raise ValueError("this torch build has no int8 weight-only kernel: use --llm-precision bfloat16 or float32")
    return precision


def _native_bf16(torch: Any) -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def model_dtype(precision: str, torch: Any) -> Any:
    """The torch dtype the model's weights load in for a resolved ``precision``."""
    return torch.float32 if precision == "float32" else torch.bfloat16


def quantize_decode_linears(model: Any, torch: Any) -> int:
    """Give every ``nn.Linear`` of ``model`` an int8 decode path (in place); returns how many were converted.

    Tied weights (SmolLM2's embedding and output head) stay tied: the dense path reads the same parameter.
    """
    cls = _int8_linear_class()
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, cls(child))
                count += 1
    return count


@functools.cache
def _int8_linear_class() -> type:
    """The module class, built on first use so that importing this module does not import torch."""
    import torch

    class DecodeInt8Linear(torch.nn.Module):
        """A linear layer with dense weights for many rows and int8 weights for a few (see the module doc)."""

        def __init__(self, linear: Any) -> None:
            super().__init__()
            self.linear = linear
            weight = linear.weight.detach().float()
            scale = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
            self.register_buffer("weight_int8", torch.round(weight / scale[:, None]).clamp(-127, 127)
                                 .to(torch.int8).contiguous(), persistent=False)
            self.register_buffer("scale", scale.to(linear.weight.dtype).contiguous(), persistent=False)

        @property
        def weight(self) -> Any:
            return self.linear.weight

        def forward(self, x: Any) -> Any:
            rows = x.numel() // x.shape[-1]
            if rows > DECODE_ROWS or x.dtype != self.scale.dtype:
                return self.linear(x)
            out = torch._weight_int8pack_mm(x.reshape(rows, x.shape[-1]).contiguous(), self.weight_int8, self.scale)
            out = out.reshape(*x.shape[:-1], out.shape[-1])
            return out if self.linear.bias is None else out + self.linear.bias

    return DecodeInt8Linear
