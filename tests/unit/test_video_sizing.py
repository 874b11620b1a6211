"""fit_to_grid: sizes on the Qwen3-VL 32-px grid, values worked out by hand in the comments."""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from paravt_core.video import fit_to_grid


@pytest.mark.parametrize(
    ("height", "width", "kwargs", "expected"),
    [
        # Already on the grid and inside the budget: unchanged.
        (96, 128, {}, (96, 128)),
        # Exactly the default budget 224*224 = 50176: unchanged.
        (224, 224, {}, (224, 224)),
        # 640x360: scale = sqrt(230400/50176) = 480/224; 360*224/480 = 168 -> floor(168/32)=5 -> 160;
        # 640*224/480 = 298.67 -> floor(9.33)=9 -> 288.
        (360, 640, {}, (160, 288)),
        # 1280x720: scale = 960/224; 720*224/960 = 168 -> 160; 1280*224/960 = 298.67 -> 288.
        (720, 1280, {}, (160, 288)),
        # 1920x1080: scale = 1440/224; 1080*224/1440 = 168 -> 160; 1920*224/1440 = 298.67 -> 288.
        (1080, 1920, {}, (160, 288)),
        # Half-to-even rounding like the Qwen processors: 80/32 = 2.5 -> 2 -> 64; 48/32 = 1.5 -> 2 -> 64.
        (80, 48, {}, (64, 64)),
        # Tiny frame: 20/32 rounds to 1 -> 32x32 = 1024 >= 784.
        (20, 20, {}, (32, 32)),
        # Below min_pixels=4096: scale = sqrt(4096/100) = 6.4; ceil(64/32)*32 = 64 on both sides.
        (10, 10, {"min_pixels": 4096}, (64, 64)),
        # Custom budget 100000 for 1280x720: scale = sqrt(921600/100000) = 3.0358; 720/3.0358 = 237.2 -> 224;
        # 1280/3.0358 = 421.6 -> 416; 224*416 = 93184 <= 100000.
        (720, 1280, {"max_pixels": 100000}, (224, 416)),
        # Degenerate thin frame 10x2000 where the Qwen rule overshoots (32x3136): the longer side is trimmed
        # to 50176 // 32 = 1568 (a multiple of 32), so the budget holds.
        (10, 2000, {}, (32, 1568)),
    ],
)
def test_fit_to_grid_known_values(height, width, kwargs, expected):
    assert fit_to_grid(height, width, **kwargs) == expected


@pytest.mark.parametrize(
    ("height", "width", "kwargs"),
    [
        (0, 10, {}),
        (10, -1, {}),
        (10, 10, {"min_pixels": 2000, "max_pixels": 1000}),
        (10, 10, {"max_pixels": 1000}),  # below one 32x32 cell
        (1, 500, {}),  # aspect ratio 500:1
    ],
)
def test_fit_to_grid_rejects_bad_sizes(height, width, kwargs):
    with pytest.raises(ValueError):
        fit_to_grid(height, width, **kwargs)


@given(
    st.integers(min_value=16, max_value=4096),
    st.integers(min_value=16, max_value=4096),
    st.sampled_from([1024, 4096, 50176, 200704]),
)
def test_fit_to_grid_invariants(height, width, max_pixels):
    assume(max(height, width) / min(height, width) <= 200)
    h, w = fit_to_grid(height, width, max_pixels=max_pixels, min_pixels=784)
    assert h % 32 == 0 and w % 32 == 0
    assert 784 <= h * w <= max_pixels
    # The longer side stays the longer side (or they become equal).
    assert (h >= w) if height > width else (w >= h) if width > height else True
