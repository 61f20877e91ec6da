"""Test helper: an int8 ONNX graph with its activation quantisation removed.

Every ``QuantizeLinear`` and every ``DequantizeLinear`` of a computed tensor becomes the identity;
the weights' ``DequantizeLinear`` (of initializers) stay. The result computes the same network on the
same dequantised weights in float: what :class:`nstcam.fast.ArbitraryNet` computes.
"""

from __future__ import annotations

from pathlib import Path


def float_activations(path: Path, out: Path) -> Path:
    """Writes ``path``'s graph without activation quantisation to ``out``; returns ``out``."""
    import onnx

    model = onnx.load(str(path))
    graph = model.graph
    consts = {t.name for t in graph.initializer}
    alias: dict[str, str] = {}
    kept = []
    for node in graph.node:
        if node.op_type == "QuantizeLinear" or (
            node.op_type == "DequantizeLinear" and node.input[0] not in consts
        ):
            alias[node.output[0]] = node.input[0]
        else:
            kept.append(node)

    def source(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    for node in kept:
        for i, name in enumerate(node.input):
            node.input[i] = source(name)
    produced = {o for node in kept for o in node.output}
    kept += [
        onnx.helper.make_node("Identity", [source(o.name)], [o.name])
        for o in graph.output
        if o.name not in produced
    ]
    del graph.node[:]
    graph.node.extend(kept)
    onnx.save(model, str(out))
    return out
