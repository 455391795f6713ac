"""Kokoro's 7-bit weights for CPUs whose 8-bit products saturate (rtc_agent/engines/tts/kokoro_weights.py): which
CPUs need them, and a model quantized the way Kokoro's was (ONNX Runtime's ``quantize_dynamic``, int8 weights)
rewritten into 7 bits still computes what the float model does."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines.tts import kokoro_spec
from rtc_agent.engines.tts.kokoro import KokoroEngine
from rtc_agent.engines.tts.kokoro_weights import (
    cpu_has_vnni,
    model_for_cpu,
    reduce_weight_range,
    weight_bits_for_cpu,
)

EPYC = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse4_1 avx avx2 fma bmi2\n"
XEON = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_int8\n"
ALDER_LAKE = "flags\t\t: fpu avx2 avx_vnni\n"


def test_cpus_without_vnni_get_7_bit_weights_and_a_setting_decides_when_given() -> None:
    assert not cpu_has_vnni(EPYC) and cpu_has_vnni(XEON) and cpu_has_vnni(ALDER_LAKE)
    assert cpu_has_vnni("no flags line here")  # unreadable: the packaged model as it is
    assert weight_bits_for_cpu(0, machine="x86_64", cpuinfo=EPYC) == 7
    assert weight_bits_for_cpu(0, machine="x86_64", cpuinfo=XEON) == 8
    assert weight_bits_for_cpu(0, machine="aarch64", cpuinfo=EPYC) == 8  # ARM's int8 dot products do not saturate
    assert weight_bits_for_cpu(8, machine="x86_64", cpuinfo=EPYC) == 8
    assert weight_bits_for_cpu(7, machine="x86_64", cpuinfo=XEON) == 7
    with pytest.raises(ValueError, match="kokoro_weight_bits"):
        weight_bits_for_cpu(6)
    with pytest.raises(ValueError, match="weight_bits"):
        KokoroEngine(cache_dir="/nonexistent", weight_bits=4)
    with pytest.raises(SettingsError, match="weight_bits"):  # at start-up, as every other setting
        kokoro_spec(Settings(kokoro_weight_bits=4))


def quantized_model(folder: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """``x @ A``, ReLU, ``@ B``, ReLU, ``@ B`` again (a weight two layers share, as Kokoro's ALBERT encoder does),
    dynamically quantized with int8 weights; the file and the float weights."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(7)
    a = rng.normal(0, 0.4, (16, 12)).astype(np.float32)
    b = rng.normal(0, 0.4, (12, 12)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "A"], ["h1"]), helper.make_node("Relu", ["h1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "B"], ["h2"]), helper.make_node("Relu", ["h2"], ["r2"]),
             helper.make_node("MatMul", ["r2", "B"], ["y"])]
    graph = helper.make_graph(nodes, "shared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 12])],
                              [numpy_helper.from_array(a, "A"), numpy_helper.from_array(b, "B")])
    float_path, path = folder / "float.onnx", folder / "model.int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(float_path))
    quantize_dynamic(str(float_path), str(path), weight_type=QuantType.QInt8)
    return path, a, b


def run(path: Path, x: np.ndarray) -> np.ndarray:
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_7_bit_weights_compute_what_the_float_model_does(tmp_path: Path) -> None:
    path, a, b = quantized_model(tmp_path)
    model = onnx.load(str(path))
    assert reduce_weight_range(model) == 2  # A and B; B once although two layers use it
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert all(weights[n].min() >= -64 and weights[n].max() <= 63 for n in ("A_quantized", "B_quantized"))
    reduced = tmp_path / "model.int8-w7.onnx"
    onnx.save(model, str(reduced))
    x = np.random.default_rng(3).normal(0, 1, (32, 16)).astype(np.float32)
    expected = np.maximum(np.maximum(x @ a, 0) @ b, 0) @ b
    scale = float(np.abs(expected).max())
    for candidate in (path, reduced):
        error = float(np.abs(run(candidate, x) - expected).max())
        assert error < 0.08 * scale, (candidate.name, error, scale)


def test_the_7_bit_copy_is_made_once_and_again_when_the_model_changes(tmp_path: Path) -> None:
    path, _, _ = quantized_model(tmp_path)
    said: list[str] = []
    assert model_for_cpu(path, 8, said.append) == path and not said
    copy = model_for_cpu(path, 7, said.append)
    assert copy.name == "model.int8-w7.onnx" and copy.exists() and len(said) == 2
    made = copy.stat().st_mtime_ns
    assert model_for_cpu(path, 7, said.append) == copy and len(said) == 2  # reused
    os.utime(path, ns=(made + 10**9, made + 10**9))  # the packaged model replaced
    model_for_cpu(path, 7, said.append)
    assert len(said) == 4
