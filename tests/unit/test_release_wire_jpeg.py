"""Frames on the wire to OpenAI-compatible servers: the release's frame path (``agent.frame_path=qwen-vl-utils``)
sends each frame as the JPEG-85 bytes its pixels were decoded from, as the release's ``pil_to_b64`` does, so the
server decodes exactly the pixels we hold; frames of our own path go as lossless PNG. Real fixture videos, real
frame paths; the expected bytes are made here by PIL from the frames before their JPEG round trip."""

from __future__ import annotations

import base64
import gc
import io

import numpy as np
import pytest
import torch
from PIL import Image

from paravt_core.engines.openai_engine import frame_to_data_url, to_openai_messages
from paravt_core.video import api as video_api
from paravt_core.video import release_frames as R
from tests.support.eval_support import fixture_entry


@pytest.fixture(scope="module")
def video(eval_fixtures) -> str:
    return fixture_entry(eval_fixtures, "videomme")["media_root"] + "/data/fxSynthA001.mp4"


def _decoded(url: str, media_type: str) -> tuple[bytes, np.ndarray]:
    """(the bytes, their pixels as PIL decodes them: what the server reads) of a data URL of ``media_type``."""
    head, payload = url.split(",", 1)
    assert head == f"data:{media_type};base64"
    data = base64.b64decode(payload)
    return data, np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _pil_jpeg_85(frame: torch.Tensor) -> bytes:
    """What the release's ``pil_to_b64`` encodes for one C x H x W frame: PIL JPEG at quality 85."""
    buf = io.BytesIO()
    Image.fromarray(frame.permute(1, 2, 0).numpy()).save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def _hwc(frame: torch.Tensor) -> np.ndarray:
    return frame.permute(1, 2, 0).numpy()


@pytest.mark.parametrize("kind", ["overview", "crop"])
def test_release_frames_go_as_the_jpeg_bytes_their_pixels_came_from(video, kind):
    if kind == "overview":
        sent, raw = R.overview(video), R.overview(video, jpeg=False)
        assert len(sent) == 64  # the fixture video's 64 frames, every one
    else:
        sent, raw = R.crop(video, 1.0, 3.0), R.crop(video, 1.0, 3.0, jpeg=False)
        assert sent.indices == [8, 24]  # 1-3 s at 8 fps: frames 8 to 24, 17 frames = 2.1 s -> 2
    for frame, before in zip(sent.frames, raw.frames, strict=True):  # iterated as the episode does
        data, pixels = _decoded(frame_to_data_url(frame), "image/jpeg")
        assert data == _pil_jpeg_85(before)  # the release's bytes for these pixels, byte for byte
        assert np.array_equal(pixels, _hwc(frame))  # and the server decodes exactly the frame we hold
    # indexing and slicing reach that frame's own bytes: the last frame differs from the first (overview: frame
    # 63 at 7.875 s, nothing shown, frame 0 neither; so take frame 16 at 2 s, the red circle; crop: 8 against 24)
    k = 16 if kind == "overview" else 1
    assert not torch.equal(raw.frames[k], raw.frames[0])
    for view in (sent.frames[k], sent.frames[1:][k - 1], sent.frames[k : k + 1][0]):
        data, _ = _decoded(frame_to_data_url(view), "image/jpeg")
        assert data == _pil_jpeg_85(raw.frames[k]) != _pil_jpeg_85(raw.frames[0])


def test_our_frame_path_and_altered_release_frames_go_as_png_of_their_pixels(video):
    ours = video_api.overview(video, 4)
    for frame in ours.frames:
        _, pixels = _decoded(frame_to_data_url(frame), "image/png")
        assert np.array_equal(pixels, _hwc(frame))
    frame = R.overview(video).frames[10]
    # not one whole frame of the JPEG'd stack: no JPEG decodes to them, so the pixels go losslessly
    for other in (frame.clone(), frame[:, :28, :56], frame.flip(2), frame.permute(1, 2, 0)):
        _, pixels = _decoded(frame_to_data_url(other), "image/png")
        expected = other.numpy() if other.shape[-1] == 3 else _hwc(other)
        assert np.array_equal(pixels, expected)
    # a view of a 3-frame stack transposed to a frame's shape (channel 0 of each frame) is not a frame either
    cube = R.jpeg_round_trip(torch.arange(3 * 3 * 8 * 16).reshape(3, 3, 8, 16).remainder(251).to(torch.uint8))
    _, pixels = _decoded(frame_to_data_url(cube.transpose(0, 1)[0]), "image/png")
    assert np.array_equal(pixels, _hwc(cube.transpose(0, 1)[0]))
    assert frame_to_data_url(cube[0]).startswith("data:image/jpeg;base64,")


def test_the_bytes_live_as_long_as_a_frame_of_them(video):
    frames = R.overview(video)
    frame = frames.frames[5]
    expected = frame_to_data_url(frame)
    del frames
    gc.collect()
    assert frame_to_data_url(frame) == expected  # the stack (and its bytes) kept alive by its frame


def test_chat_messages_carry_release_frames_as_jpeg_and_ours_as_png(video):
    release, ours = R.crop(video, 1.0, 3.0).frames, video_api.crop(video, 1.0, 3.0, max_frames=2).frames
    parts = [
        *({"type": "image", "image": f} for f in release),
        *({"type": "image", "image": f} for f in ours),
    ]
    (message,) = to_openai_messages([{"role": "user", "content": [*parts, {"type": "text", "text": "Q"}]}])
    urls = [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]
    assert [u.split(";")[0] for u in urls] == ["data:image/jpeg"] * 2 + ["data:image/png"] * 2
    for url, frame in zip(urls, [*release, *ours], strict=True):
        _, pixels = _decoded(url, url.split(";")[0].removeprefix("data:"))
        assert np.array_equal(pixels, _hwc(frame))
