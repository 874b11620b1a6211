"""How a player shows a decoded picture: the container's display matrix (rotation, mirroring) and the
sample aspect ratio (non-square pixels). Pure functions over plain numbers and arrays.

A display matrix maps a source pixel (p, q) to the shown pixel (a*p + c*q, b*p + d*q) (FFmpeg's
``libavutil/display.h`` convention, 16.16 fixed point). Phone video is rotated by multiples of 90 degrees,
so only the eight right-angle transforms are applied; any other angle is snapped to the nearest of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


@dataclass(frozen=True)
class Display:
    """Transform from decoded picture to shown picture: optional transpose, then optional mirrorings of
    the result's columns (``flip_x``) and rows (``flip_y``); ``sar`` stretches the source's width."""

    transpose: bool = False
    flip_x: bool = False
    flip_y: bool = False
    sar: Fraction = Fraction(1)

    @property
    def identity(self) -> bool:
        return not (self.transpose or self.flip_x or self.flip_y) and self.sar == 1

    def shown_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) a player shows for a ``width`` x ``height`` picture: the sample aspect ratio
        widens (or narrows) the picture, then the rotation may swap the sides."""
        w = max(1, round(width * self.sar))
        return (height, w) if self.transpose else (w, height)

    def decode_size(self, shown: tuple[int, int]) -> tuple[int, int]:
        """(height, width) to scale a decoded picture to so that ``apply`` yields ``shown`` (h, w)."""
        h, w = shown
        return (w, h) if self.transpose else (h, w)

    def apply(self, image: np.ndarray) -> np.ndarray:
        """HxWxC picture (already scaled to ``decode_size``) -> shown picture, contiguous."""
        if self.transpose:
            image = image.transpose(1, 0, 2)
        if self.flip_x:
            image = image[:, ::-1]
        if self.flip_y:
            image = image[::-1]
        return np.ascontiguousarray(image)


def _snap(value: float) -> int:
    return 0 if abs(value) < 0.5 else (1 if value > 0 else -1)


def display_from_matrix(matrix: list[int] | None, sar: Fraction | None = None) -> Display:
    """``Display`` for a 3x3 display matrix (nine int32, row-major, FFmpeg layout) and a sample aspect
    ratio (None or 0 mean square pixels)."""
    sar = Fraction(sar) if sar else Fraction(1)
    if matrix is None or len(matrix) != 9:
        return Display(sar=sar)
    a, b, c, d = (v / 65536 for v in (matrix[0], matrix[1], matrix[3], matrix[4]))
    scale = math.sqrt(abs(a * d - b * c)) or 1.0
    if abs(a * d - b * c) < 1e-9:
        return Display(sar=sar)  # degenerate matrix: nothing sensible to apply
    # Snap to the nearest right-angle transform: the larger of |a| and |b| decides whether axes swap.
    if abs(a) + abs(d) >= abs(b) + abs(c):
        sa, sd = _snap(a / scale) or 1, _snap(d / scale) or 1
        return Display(False, sa < 0, sd < 0, sar)
    # Transposed: p' = c*q, q' = b*p, so shown[q'][p'] = src[q][p] is src transposed, then mirrored.
    sb, sc = _snap(b / scale) or 1, _snap(c / scale) or 1
    return Display(True, sc < 0, sb < 0, sar)
