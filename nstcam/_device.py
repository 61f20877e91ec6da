"""Device selection and memory queries."""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

__all__ = ["available_memory", "bf16_autocast", "on_zerogpu", "pick_device"]


def pick_device(device: torch.device | str | None = None) -> torch.device:
    """The device to run on: ``device`` if given, else CUDA, else MPS, else CPU."""
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def available_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on ``device``, or None when unknown."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def bf16_autocast(asked: bool, device: torch.device) -> bool:
    """Whether to run bfloat16 autocast: asked for, on CUDA, and on a GPU with native bf16 (compute
    capability 8.0 and up: Ampere, Hopper...). On older GPUs (a T4 is 7.5, the Space's suggested
    hardware) bf16 is emulated and slower than fp32, so the engine stays fp32 and says so."""
    if not asked or device.type != "cuda":
        return False
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        logger.warning(
            "amp=True ignored: this GPU (compute capability %d.%d) has no native bfloat16; running fp32",
            major,
            minor,
        )
        return False
    return True


def on_zerogpu() -> bool:
    """Whether this process runs on Hugging Face ZeroGPU (the ``spaces`` package in ZeroGPU mode):
    a GPU borrowed per call, in a worker forked from this process (:mod:`nstcam.app.run.zerogpu`)."""
    try:
        from spaces.config import Config  # type: ignore[import-not-found]
    except ImportError:
        return False
    return bool(Config.zero_gpu)
