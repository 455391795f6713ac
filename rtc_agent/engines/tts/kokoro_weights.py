"""Kokoro's int8 weights on CPUs whose 8-bit dot products saturate: a 7-bit copy of the model for them.

The packaged Kokoro model is dynamically quantized: ``MatMulInteger`` and ``DynamicQuantizeLSTM`` multiply uint8
activations by int8 weights. On x86 CPUs without VNNI (AMD EPYC/Ryzen before Zen 4, Intel before Cascade Lake),
ONNX Runtime computes those products with ``VPMADDUBSW``, which adds two products into a *saturating* int16: with
8-bit weights a sum past 32767 is clipped, and the voice comes out garbled on some sentences (measured on a 2-core
AMD EPYC: a Spanish sentence heard by Whisper as Italian, which the same model reads cleanly on a VNNI Xeon). With
weights in 7 bits (-64..63) two products cannot reach the limit: ONNX Runtime's own advice for such CPUs
(``reduce_range``).

:func:`reduce_weight_range` makes that copy from the packaged model: every int8 weight of those operators whose
zero point is 0 is halved (rounded to -64..63) and its scale doubled, so each weight stands for about the same
value, one bit coarser. :func:`weight_bits_for_cpu` says which the CPU needs (setting ``kokoro_weight_bits``);
:func:`model_for_cpu` makes the copy once beside the packaged model (``<name>-w7.onnx``, remade when the packaged
model changes) and returns the file to load.
"""

from __future__ import annotations

import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cpu_has_vnni", "model_for_cpu", "reduce_weight_range", "weight_bits_for_cpu"]

#: ``(weight input, its zero point input)`` of each operator whose int8 weights meet uint8 activations
_WEIGHT_INPUTS: dict[str, tuple[tuple[int, int], ...]] = {
    "MatMulInteger": ((1, 3),),
    "DynamicQuantizeLSTM": ((1, 9), (2, 11)),  # W (zero point W_zero_point), R (R_zero_point)
}
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
REDUCED_SUFFIX = "-w7"


def cpu_has_vnni(cpuinfo: str | None = None) -> bool:
    """Whether the CPU multiplies 8-bit integers without saturating (VNNI or AMX), from ``/proc/cpuinfo`` (or the
    given text). True where the flags cannot be read: the packaged model stays as it is."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        except OSError:
            return True
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return any(flag in flags for flag in VNNI_FLAGS)
    return True


def weight_bits_for_cpu(setting: int = 0, *, machine: str | None = None, cpuinfo: str | None = None) -> int:
    """The weight width to run: ``setting`` when it is 7 or 8; 0 (auto): 7 on an x86 CPU without VNNI, else 8."""
    if setting in (7, 8):
        return setting
    if setting != 0:
        raise ValueError(f"kokoro_weight_bits must be 0 (auto), 7 or 8, got {setting!r}")
    arch = (machine or platform.machine()).lower()
    return 7 if arch in ("x86_64", "amd64", "i686", "i386") and not cpu_has_vnni(cpuinfo) else 8


def reduce_weight_range(model: Any) -> int:
    """Halve ``model``'s (an ``onnx.ModelProto``, changed in place) int8 operator weights into 7 bits and double
    their scales (see the module docstring); the number of weight tensors changed. A weight whose zero point is not
    0, or whose scale is not the ``<weight>_scale`` initializer beside it, is left as it is."""
    from onnx import TensorProto, numpy_helper

    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    done: set[str] = set()  # weights and scales already changed (layers that share weights name them again)
    changed = 0
    for node in model.graph.node:
        for weight_at, zero_at in _WEIGHT_INPUTS.get(node.op_type, ()):
            if len(node.input) <= weight_at:
                continue
            name = node.input[weight_at]
            weight = initializers.get(name)
            if name in done or weight is None or weight.data_type != TensorProto.INT8:
                continue
            zero = initializers.get(node.input[zero_at]) if len(node.input) > zero_at else None
            if zero is not None and np.any(numpy_helper.to_array(zero)):
                continue
            scale = initializers.get(name.removesuffix("_quantized") + "_scale")
            if scale is None or scale.data_type != TensorProto.FLOAT:
                continue
            values = numpy_helper.to_array(weight).astype(np.int16)
            weight.CopyFrom(numpy_helper.from_array(np.clip(np.round(values / 2), -64, 63).astype(np.int8), name))
            if scale.name not in done:
                scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * np.float32(2), scale.name))
                done.add(scale.name)
            done.add(name)
            changed += 1
    return changed


def model_for_cpu(packaged: Path, bits: int, progress: Callable[[str], None]) -> Path:
    """The model file to load: ``packaged`` for 8-bit weights; for 7, its reduced copy beside it (made once, and
    again when ``packaged`` changes: the copy's stamp file holds the size and time of the file it came from)."""
    if bits == 8:
        return packaged
    target = packaged.with_name(packaged.stem + REDUCED_SUFFIX + packaged.suffix)
    marker = target.with_name(target.name + ".from")
    stamp = f"{packaged.stat().st_size} {packaged.stat().st_mtime_ns}"
    if target.exists() and marker.exists() and marker.read_text(encoding="ascii") == stamp:
        return target
    import onnx

    progress(f"making the 7-bit weights of {packaged.name} for this CPU (no VNNI: 8-bit products saturate)")
    model = onnx.load(str(packaged))
    changed = reduce_weight_range(model)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".")
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    marker.write_text(stamp, encoding="ascii")
    progress(f"{target.name}: {changed} weight tensors in 7 bits")
    return target
