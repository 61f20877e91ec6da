"""Reading an ONNX file's convolutions as float tensors, with the ``onnx`` package (no onnxruntime).

Quantised graphs (``QuantizeLinear``/``DequantizeLinear`` pairs, int8 weights, int32 biases) are
dequantised here, per channel where the graph says so: ``(q - zero_point) * scale``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

__all__ = ["conv_params", "initializers"]


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:
        raise ImportError(
            "reading the fast networks' ONNX files needs the onnx package (requirements.txt)"
        ) from e
    return onnx, numpy_helper


def _dequantize(node, arrays: dict[str, np.ndarray], onnx) -> np.ndarray:
    q = arrays[node.input[0]].astype(np.float64)
    scale = arrays[node.input[1]].astype(np.float64)
    zero = arrays[node.input[2]].astype(np.float64) if len(node.input) > 2 else np.zeros_like(scale)
    axis = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and scale.size > 1:  # per channel along ``axis``
        shape = [1] * q.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((q - zero) * scale).astype(np.float32)


def initializers(path: Path) -> dict[str, np.ndarray]:
    """Every constant of the graph, as float where it was stored quantised: keyed by the initializer's
    name and, for a dequantised one, also by the name of the ``DequantizeLinear`` output."""
    onnx, numpy_helper = _onnx()
    graph = onnx.load(str(path)).graph
    arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    out = dict(arrays)
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in arrays:
            out[node.output[0]] = out[node.input[0]] = _dequantize(node, arrays, onnx)
    return out


def conv_params(path: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    """Each convolution's float (weight, bias), keyed by its weight's scope: the weight initializer's
    name without its last part (``transformer/contract/conv1/weights`` -> ``transformer/contract/conv1``)."""
    onnx, _ = _onnx()
    graph = onnx.load(str(path)).graph
    consts = initializers(path)
    params: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        w_name = _source(graph, node.input[1])
        w = torch.from_numpy(consts[node.input[1]].astype(np.float32).copy())
        b = torch.from_numpy(consts[node.input[2]].astype(np.float32).copy()) if len(node.input) > 2 else None
        params[w_name.rsplit("/", 1)[0]] = (w, b)
    return params


def _source(graph, name: str) -> str:
    """The initializer a (dequantised) tensor comes from."""
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] == name:
            return node.input[0]
    return name
