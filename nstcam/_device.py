"""Device selection and memory queries."""

from __future__ import annotations

import torch

__all__ = ["available_memory", "pick_device"]


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
