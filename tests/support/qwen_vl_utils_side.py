"""Run in a subprocess with qwen-vl-utils 0.0.14 and decord 0.6.0 on its path (tests/contract/test_eval_release_frames.py):
the release's two calls of ``fetch_video`` (paravt/eval/utils.py get_frames and crop_frames at cf55249) on one
video, frames saved as uint8 .npy and their indices as JSON.

    python tests/support/qwen_vl_utils_side.py VIDEO OUT_PREFIX START END BACKEND

BACKEND: torchcodec (the release's: its requirements/eval.lock pins torchcodec 0.10.0, which qwen-vl-utils
prefers) or decord.
"""

import json
import os
import sys

os.environ["FORCE_QWENVL_VIDEO_READER"] = sys.argv[5]  # read when qwen-vl-utils is imported

import numpy as np  # noqa: E402
from qwen_vl_utils.vision_process import fetch_video  # noqa: E402

video, out, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
fallback = __import__("qwen_vl_utils.vision_process", fromlist=["x"]).VIDEO_READER_BACKENDS


def _no_fallback(
    ele,
):  # fetch_video falls back to torchvision on any error: make the backend's own failure loud
    raise RuntimeError(f"{sys.argv[5]} failed")


fallback["torchvision"] = _no_fallback
calls = {
    "overview": {"type": "video", "video": f"file://{video}", "nframes": 64},
    "crop": {"type": "video", "video": f"file://{video}", "fps": 1, "min_frames": 1, "max_frames": 16,
             "min_pixels": 784, "max_pixels": 50176, "video_start": start, "video_end": end},
}  # fmt: skip
indices = {}
for name, ele in calls.items():
    frames, meta = fetch_video(ele, return_video_metadata=True)
    np.save(f"{out}_{name}.npy", frames.numpy().astype(np.uint8))  # as utils.py turns them into images
    indices[name] = [int(i) for i in meta["frames_indices"]]
with open(f"{out}.json", "w") as fh:
    json.dump(indices, fh)
