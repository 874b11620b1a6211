"""Frame sizes on the Qwen3-VL patch grid (pure functions).

Qwen3-VL cuts frames into 16-px patches and merges 2x2 of them, so both sides must be multiples of 32.
The rounding rule is the one the Qwen processors use (Python ``round``, i.e. half-to-even), so a frame we
resize is left untouched when the processor checks it again with the same budget.
"""

from __future__ import annotations

import math

GRID = 32
DEFAULT_MAX_PIXELS = 50176  # 224 * 224
DEFAULT_MIN_PIXELS = 784  # 28 * 28
MAX_ASPECT_RATIO = 200


def fit_to_grid(
    height: int,
    width: int,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    min_pixels: int = DEFAULT_MIN_PIXELS,
    factor: int = GRID,
) -> tuple[int, int]:
    """Return ``(height, width)`` rounded to multiples of ``factor``, keeping the aspect ratio, with
    ``height * width <= max_pixels`` always and ``>= min_pixels`` unless that would break the maximum.

    Matches ``smart_resize`` of the Qwen processors except in degenerate cases where that one overshoots
    ``max_pixels``."""
    if height <= 0 or width <= 0:
        raise ValueError(f"frame size must be positive, got {width}x{height}")
    if not 0 < min_pixels <= max_pixels:
        raise ValueError(f"need 0 < min_pixels <= max_pixels, got min={min_pixels} max={max_pixels}")
    if max_pixels < factor * factor:
        raise ValueError(f"max_pixels={max_pixels} is below one grid cell ({factor}x{factor})")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio of {width}x{height} exceeds {MAX_ASPECT_RATIO}:1")
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > max_pixels:
        # Shrink by the same factor on both sides, then round *down* so the budget holds.
        scale = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / scale / factor) * factor)
        w = max(factor, math.floor(width / scale / factor) * factor)
    elif h * w < min_pixels:
        # Grow by the same factor, then round *up* so the minimum holds.
        scale = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * scale / factor) * factor
        w = math.ceil(width * scale / factor) * factor
    if h * w > max_pixels:
        # Only in degenerate cases (very thin frames, or min_pixels close to max_pixels): the budget is a
        # memory bound, so it wins; trim the longer side.
        if w >= h:
            w = max(factor, max_pixels // h // factor * factor)
        else:
            h = max(factor, max_pixels // w // factor * factor)
    return h, w
