"""Decode steps of several sequences at once through int8 x int8 products (FBGEMM's dynamic quantized linear).

The int4 weight-only kernel of :mod:`.precision` unpacks the weights again for every input row, so a step's cost
grows with its rows: Qwen2.5-0.5B's linear layers (every weight read from memory, one thread, a 2-core AMD EPYC with
AVX-512) took 20.6 ms for one row and 30.4 ms for three. ``quantized::linear_dynamic`` quantizes the input rows at
each call and multiplies them with per-output-channel int8 weights in integer arithmetic (VNNI or AVX2):
20.5 ms for one row and 22.1 ms for three, so three rows cost about what one does. A decode step of
:data:`BATCH_ROWS` sequences (a room's listen languages translated together, sessions whose replies decode in one
batch) takes this path; a single sequence and every prompt keep the int4 or int8 weight-only one, so one
conversation's numbers are the same with it on or off.

It costs an int8 copy of every decoded linear layer beside the int4 one (Qwen2.5-0.5B: 0.50 GB, 0.14 GB of it the
output head, whose best ``HEAD_RESCORE_TOP`` tokens a row are still computed again from its dense weights: over 8
sentences x 3 languages the translations were identical to those of the int4 head, and a batch of three took 6.5 %
less time natively and 14 % less under ``cpu-profile avx2``). The inputs are quantized to 7 bits
(``reduce_range``), which keeps the 16-bit pair sums of AVX2 CPUs without VNNI from saturating. Over 40 Asterisk
prompts into es, it and fr, translated three at a time on one thread, chrF moved by +1.4 / -0.7 / +1.0 against the
int4 path and the step took 46 ms instead of 54 ms (under ``cpu-profile avx2``: -1.9 / -0.8 / +0.2, 54 ms instead
of 80 ms).

``llm_batch_int8``: ``auto`` uses it where torch has the x86/FBGEMM quantized engine and runs its AVX2 or AVX-512
kernels (``torch.backends.cpu.get_cpu_capability()``: not under ``ATEN_CPU_CAPABILITY=default``), ``on`` requires
it, ``off`` never uses it.
"""

from __future__ import annotations

import warnings
from typing import Any

from rtc_agent.config import LLM_BATCH_INT8_MODES

__all__ = ["BATCH_ROWS", "MODES", "available", "is_batch_step", "matmul", "pack", "resolve"]

#: Rows of a decode step (one token per sequence) that take the int8 x int8 path.
BATCH_ROWS = range(2, 9)
MODES = LLM_BATCH_INT8_MODES
_ENGINES = ("x86", "fbgemm")


def available(torch: Any) -> bool:
    """Whether this torch has the dynamic int8 linear on fast x86 kernels."""
    try:
        engines = set(torch.backends.quantized.supported_engines)
        capability = str(torch.backends.cpu.get_cpu_capability()).upper()
    except (AttributeError, RuntimeError):
        return False
    if not engines & set(_ENGINES) or capability not in ("AVX2", "AVX512"):
        return False
    try:  # the quantized tensors it packs from are deprecated in torch: check that this build still makes them
        return tuple(matmul(torch.ones(1, 32), pack(torch.ones(16, 32), torch), torch).shape) == (1, 16)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def resolve(mode: str, torch: Any) -> bool:
    """Whether decode steps of several rows take the int8 path for the setting ``mode``; ``on`` where it is not
    available raises ``ValueError``."""
    if mode not in MODES:
        raise ValueError(f"unknown llm_batch_int8 {mode!r}: use one of {', '.join(MODES)}")
    if mode == "off":
        return False
    usable = available(torch)
    if mode == "on" and not usable:
        raise ValueError("llm_batch_int8 on: this torch has no x86/FBGEMM dynamic int8 linear with AVX2 kernels "
                         "(use auto or off)")
    return usable


def pack(weight: Any, torch: Any) -> Any:
    """The prepacked per-output-channel int8 copy of a float ``[out, in]`` weight."""
    weight = weight.detach().float()
    scale = (weight.abs().amax(dim=1) / 127.0).clamp(min=1e-8).double()
    zero = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # torch 2.13 calls quantized tensors deprecated; linear_prepack takes only them
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.quantize_per_channel(weight, scale, zero, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(quantized, None)


def is_batch_step(x: Any) -> bool:
    """Whether input ``x`` (``[rows, columns, features]``) is a decode step of :data:`BATCH_ROWS` rows."""
    return x.dim() == 3 and x.shape[1] == 1 and x.shape[0] in BATCH_ROWS


def matmul(x: Any, packed: Any, torch: Any) -> Any:
    """``x @ weight.T`` for a ``[rows, in]`` input, in float32."""
    return torch.ops.quantized.linear_dynamic(x.float().contiguous(), packed, True)
