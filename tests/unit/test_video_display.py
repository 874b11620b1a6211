"""Display transforms: all eight orientations a display matrix can express, on real files, and the pure
matrix -> transform rule on hand-made matrices.

The files are written with PyAV's ``set_display_rotation(degrees, hflip)``, documented as "a
counter-clockwise rotation, flips mirror after it": the expected picture is therefore
``np.rot90(code, degrees / 90)`` then, for ``hflip``, mirrored left-right (hand truth, independent of our
matrix parsing).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from paravt_core.synth import code_image, read_code
from paravt_core.video import DecoderCache, crop, probe
from paravt_core.video.display import Display, display_from_matrix
from tests.support.video_support import write_with_orientation

ONE = 65536  # 1.0 in the matrix's 16.16 fixed point
W = 1 << 30  # the matrix's last entry (2.30 fixed point)


@pytest.mark.parametrize("hflip", [False, True])
@pytest.mark.parametrize("degrees", [0, 90, 180, 270])
def test_every_orientation_on_a_real_file(tmp_path, degrees, hflip):
    path = tmp_path / f"o{degrees}{'f' if hflip else ''}.mp4"
    write_with_orientation(path, degrees, hflip)
    turned = degrees in (90, 270)
    info = probe(path, cache=DecoderCache())
    assert (info.width, info.height) == ((96, 128) if turned else (128, 96))
    assert info.rotated == (degrees != 0 or hflip)
    c = crop(path, 0.7, 1.3, cache=DecoderCache(), max_frames=2)
    # 0.6 s -> 2 frames at 0.7 and 1.3 s -> frames 7 and 13.
    assert c.indices == [7, 13]
    for j, i in enumerate(c.indices):
        expected = np.rot90(code_image(i, 128, 96), degrees // 90)
        if hflip:
            expected = expected[:, ::-1]
        shown = c.frames[j].permute(1, 2, 0).numpy().mean(axis=2)
        assert shown.shape == expected.shape
        # Block by block, from the code's bits alone: block b = (b // 4, b % 4) is white iff bit b of i is set;
        # the 4x4 grid turns and mirrors with the picture (each side is cut into 4 equal parts).
        grid = np.array([[i >> (4 * r + col) & 1 for col in range(4)] for r in range(4)], dtype=bool)
        grid = np.rot90(grid, degrees // 90)
        assert np.array_equal(_bright_blocks(shown), grid[:, ::-1] if hflip else grid), (degrees, hflip, i)
        assert np.abs(shown - expected).mean() < 20, (degrees, hflip, i)
        # and undoing the transform by hand gives back the frame's own code
        undone = shown[:, ::-1] if hflip else shown
        assert read_code(np.rot90(undone, -(degrees // 90))) == i


def _bright_blocks(grey: np.ndarray) -> np.ndarray:
    """4x4 booleans: is the inner half of each block brighter than mid-grey."""
    h, w = grey.shape
    inner = [
        [grey[r * h // 4 + h // 16 : (r + 1) * h // 4 - h // 16, c * w // 4 + w // 16 : (c + 1) * w // 4 - w // 16]
         for c in range(4)] for r in range(4)
    ]  # fmt: skip
    return np.array([[block.mean() > 127.5 for block in row] for row in inner])


@pytest.mark.parametrize(
    ("matrix", "expected"),
    [
        ([ONE, 0, 0, 0, ONE, 0, 0, 0, W], Display()),
        ([0, -ONE, 0, ONE, 0, 0, 0, 0, W], Display(transpose=True, flip_y=True)),  # ffmpeg's rotate=90
        ([-ONE, 0, 0, 0, -ONE, 0, 0, 0, W], Display(flip_x=True, flip_y=True)),  # 180
        ([0, ONE, 0, -ONE, 0, 0, 0, 0, W], Display(transpose=True, flip_x=True)),  # 270
        ([-ONE, 0, 0, 0, ONE, 0, 0, 0, W], Display(flip_x=True)),  # mirror
        ([2 * ONE, 0, 0, 0, 2 * ONE, 0, 0, 0, W], Display()),  # a uniform scale is no rotation
        ([46341, 46341, 0, -46341, 46341, 0, 0, 0, W], Display()),  # 45 degrees: snapped to upright
        ([0, 0, 0, 0, 0, 0, 0, 0, W], Display()),  # degenerate: nothing to apply
        (None, Display()),
    ],
)
def test_matrix_to_transform(matrix, expected):
    assert display_from_matrix(matrix) == expected


def test_transform_of_a_small_array_by_hand():
    a = np.arange(6).reshape(2, 3, 1)  # [[0 1 2], [3 4 5]]
    rot90 = display_from_matrix([0, -ONE, 0, ONE, 0, 0, 0, 0, W])
    assert rot90.apply(a)[:, :, 0].tolist() == [[2, 5], [1, 4], [0, 3]]  # a quarter turn counter-clockwise
    assert Display(flip_x=True).apply(a)[:, :, 0].tolist() == [[2, 1, 0], [5, 4, 3]]
    # Sizes: SAR stretches the coded width, then a transpose swaps the sides.
    assert Display(sar=Fraction(2)).shown_size(128, 96) == (256, 96)
    assert Display(transpose=True, sar=Fraction(4, 3)).shown_size(120, 90) == (90, 160)
    assert Display(transpose=True).decode_size((128, 96)) == (96, 128)
