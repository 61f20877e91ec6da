"""Known-answer clips and volumes for Grad-CAM over time: a bright square that moves through known
frames over a dark background, and a tiny 3D CNN built (not trained) so that class 1's logit is
the amount of bright square in the window: its map must fall on the square, its score over time
must peak on the square's frames. Class 0's logit is a constant."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["BrightNet", "SquareNet", "moving_square", "square_boxes"]

SIDE = 14


def square_boxes(n: int, first: int, last: int) -> dict[int, tuple[int, int, int, int]]:
    """Frame -> (x0, y0, x1, y1) of the square in frames first..last (3 px right, 1 down a frame)."""
    boxes = {}
    for t in range(first, min(last, n - 1) + 1):
        x0, y0 = 8 + 3 * (t - first), 10 + (t - first)
        boxes[t] = (x0, y0, x0 + SIDE, y0 + SIDE)
    return boxes


def moving_square(n: int, first: int, last: int, w: int = 96, h: int = 64) -> list[np.ndarray]:
    frames = [np.full((h, w, 3), 40, np.uint8) for _ in range(n)]
    for t, (x0, y0, x1, y1) in square_boxes(n, first, last).items():
        frames[t][y0:y1, x0:x1] = 255
    return frames


class BrightNet(nn.Module):
    """conv (brightness above the background) -> ReLU -> mean over the grid -> 2 logits: class 1's
    logit is the amount of bright area (an image's, a clip's or a volume's), class 0's a constant.

    Args:
        dims: 2 (images), 3 (clips, volumes).
        channels: input channels (3: RGB; 1: a scan).
    """

    def __init__(self, dims: int = 3, channels: int = 3) -> None:
        super().__init__()
        self.conv = (nn.Conv3d if dims == 3 else nn.Conv2d)(channels, 2, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(2, 2)
        with torch.no_grad():
            self.conv.weight.fill_(1 / (channels * 3**dims))  # the neighbourhood's mean over channels
            self.conv.bias.fill_(-0.5)  # background (-1.4 normalised) stays below; the square (2.6) above
            self.fc.weight.copy_(torch.tensor([[0.0, 0.0], [20.0, 20.0]]))
            self.fc.bias.copy_(torch.tensor([1.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.relu(self.conv(x)).flatten(2).mean(2))


def SquareNet() -> BrightNet:
    """The clips' known-answer net: RGB clips, class 1 the bright square."""
    return BrightNet(3, 3)
