"""Run in a subprocess with qwen-vl-utils 0.0.14 and decord 0.6.0 on its path (tests/test_eval_release_frames.py):
the release's two calls of ``fetch_video`` (paravt/eval/utils.py get_frames and crop_frames at cf55249) on one
video, frames saved as uint8 .npy and their indices as JSON.

    python tests/qwen_vl_utils_side.py VIDEO OUT_PREFIX START END
"""

import json
import os
import sys

os.environ["FORCE_QWENVL_VIDEO_READER"] = "decord"  # the reader the release's environment has

import numpy as np  # noqa: E402
from qwen_vl_utils.vision_process import fetch_video  # noqa: E402

video, out, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
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
