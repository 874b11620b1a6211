"""Record, once, the chat requests the ParaVT release's eval driver sends for one sample per benchmark.

The release (EvolvingLMMs-Lab/ParaVT) is imported from a path given on the command line and never copied here:

    git --git-dir=<mirror> archive cf55249 | tar -x -C /tmp/release
    .venv/bin/python scripts/record_release_fixtures.py /tmp/release --commit <40-hex commit>

Each benchmark gets one synthetic dataset row (the HF schema the release's ``load_samples`` reads) and one
synthetic video (``paravt_core.synth.write_video``). The release's own ``utils.load_samples`` turns the row into a
sample and its ``driver.eval_one`` runs it with scripted replies (three rounds of ``crop_video`` calls, then the
forced answer), so every request it sends is recorded. Only what cannot run here is stubbed: ``datasets.load_dataset`` returns
the row, and the OpenAI client records the request instead of sending it (``openai`` is not installed here).
qwen-vl-utils 0.0.14 comes from the side site (``--site``, made by ``scripts/setup.sh``) with torchcodec, the
release's reader (its ``requirements/eval.lock``).

Images are stored small: size, sha256 of the decoded RGB pixels and a 4 x 4 box-filtered thumbnail, enough to
compare pixels within JPEG round-off. Output: ``tests/fixtures/release/<benchmark>.json``, read by
``tests/contract/test_eval_release_fixtures.py``.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import io
import json
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paravt_core.synth import Event, write_video  # noqa: E402

# The synthetic video every sample points at (regenerated bit for bit by the test from these parameters).
VIDEO = {
    "seconds": 12.0,
    "fps": 30.0,
    "size": [426, 240],
    "events": [
        ["circle", "red", 1.0, 8.0, [10, 10, 120, 100]],
        ["square", "blue", 3.0, 9.0, [200, 60, 300, 170]],
    ],
}
SRT = (
    "1\n00:00:01,000 --> 00:00:03,000\nA red circle appears.\n\n"
    "2\n00:00:04,000 --> 00:00:06,500\n<i>Then</i> a blue square\njoins it.\n"
)


def _call(args: str) -> str:
    return (
        f'<tool_call>\n{{"name": "crop_video", "arguments": {{"video_path": "v.mp4", {args}}}}}\n</tool_call>'
    )


# Three tool rounds, then the driver's forced answer (max_turns=3): two parallel calls, one after the end of the
# video (the driver's error message); six calls, of which the driver keeps max_parallel=5; a time as "MM:SS" and no
# end (parse_time_val, start + 10 s, past the end of the video).
CALLS = [
    "<think>Check the middle and the end.</think>\n"
    + _call('"start_time": 2.3, "end_time": 9.1')
    + "\n"
    + _call('"start_time": 20, "end_time": 30'),
    "<think>Second by second.</think>\n"
    + "\n".join(_call(f'"start_time": {t}, "end_time": {t + 1}') for t in range(6)),
    "<think>Once more.</think>\n" + _call('"start_time": "00:05"'),
]
SHAPES = ["A red circle", "A blue square", "A green triangle", "Nothing"]
Q = "Which shape appears first?"

# benchmark -> (release dataset name, prompt mode, row, where the release looks for the video under hf_home,
# our media_root under hf_home, final reply)
CASES: dict[str, dict[str, Any]] = {
    "videomme": {
        "row": {"videoID": "v", "question_id": "001-1", "duration": "short", "domain": "Synthetic",
                "task_type": "Temporal Perception", "question": Q,
                "options": [f"{k}. {s}" for k, s in zip("ABCD", SHAPES, strict=True)], "answer": "A"},
        "release_video": "videomme/data/v.mp4", "media_root": "videomme", "reply": "<answer>A</answer>",
    },
    "videomme_wsub": {
        "row": {"videoID": "v", "question_id": "001-1", "duration": "short", "domain": "Synthetic",
                "task_type": "Temporal Perception", "question": Q,
                "options": [f"{k}. {s}" for k, s in zip("ABCD", SHAPES, strict=True)], "answer": "A"},
        "release_video": "videomme/data/v.mp4", "media_root": "videomme", "reply": "<answer>A</answer>",
        "srt": "videomme/subtitle/v.srt",
    },
    "longvideobench": {
        "row": {"id": "lvb-1", "video_path": "v.mp4", "question": Q, "option0": SHAPES[0], "option1": SHAPES[1],
                "option2": SHAPES[2], "option3": SHAPES[3], "option4": "N/A", "correct_choice": 0,
                "duration_group": 15, "question_category": "TOS"},
        "release_video": "datasets/longvideobench/videos/v.mp4", "media_root": "datasets/longvideobench",
        "reply": "<answer>A</answer>",
    },
    "lvbench": {
        "row": {"uid": "lv-1", "video_path": "v.mp4", "answer": "A", "question_type": ["entity recognition"],
                "question": Q + "\n" + "\n".join(f"({k}) {s}" for k, s in zip("ABCD", SHAPES, strict=True))},
        "release_video": "lvbench/v.mp4", "media_root": "lvbench", "reply": "<answer>A</answer>",
    },
    "mlvu": {
        "row": {"video_name": "v.mp4", "question": Q, "candidates": SHAPES, "answer": SHAPES[0],
                "task_type": "order", "question_id": "order-0"},
        "release_video": "MLVU/video/v.mp4", "media_root": "MLVU/video", "reply": "<answer>A</answer>",
    },
    "mmvu": {
        "row": {"id": "mmvu-1", "question_type": "multiple-choice", "subject": "Art", "metadata": {"subject": "Art"},
                "video": "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Art/v.mp4",
                "question": Q, "choices": {"A": SHAPES[0], "B": SHAPES[1], "C": SHAPES[2], "D": SHAPES[3],
                                           "E": ""}, "answer": "A"},
        "release_video": "mmvu/videos/Art/v.mp4", "media_root": "mmvu", "reply": "<answer>A</answer>",
    },
    "videomme_direct": {  # the driver's single-turn modes (no tool): direct, and reasoning below
        "dataset": "videomme",
        "row": {"videoID": "v", "question_id": "001-1", "duration": "short", "domain": "Synthetic",
                "task_type": "Temporal Perception", "question": Q,
                "options": [f"{k}. {s}" for k, s in zip("ABCD", SHAPES, strict=True)], "answer": "A"},
        "release_video": "videomme/data/v.mp4", "media_root": "videomme", "reply": "<answer>A</answer>",
        "prompt_mode": "direct",
    },
    "mlvu_reasoning": {
        "dataset": "mlvu",
        "row": {"video_name": "v.mp4", "question": Q, "candidates": SHAPES, "answer": SHAPES[0],
                "task_type": "order", "question_id": "order-0"},
        "release_video": "MLVU/video/v.mp4", "media_root": "MLVU/video",
        "reply": "<think>Red first.</think><answer>A</answer>", "prompt_mode": "reasoning",
    },
    "mmvu_open_ended": {  # the same loader; an open-ended item (empty choices) as the release reads it
        "dataset": "mmvu",
        "row": {"id": "mmvu-2", "question_type": "open-ended", "subject": "Art", "metadata": {"subject": "Art"},
                "video": "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Art/v.mp4",
                "question": "What colour is the circle?", "choices": {}, "answer": "red"},
        "release_video": "mmvu/videos/Art/v.mp4", "media_root": "mmvu", "reply": "<answer>red</answer>",
    },
    "charades": {
        "row": {"video": "v.mp4", "caption": "a red circle appears", "timestamp": [1.0, 8.0]},
        "release_video": "charades_sta/Charades_v1_480/v.mp4", "media_root": "charades_sta",
        "reply": "The event happens in 1.0 - 8.0 seconds.", "prompt_mode": "agentic_minimal",
        "video_channel": "video_url",  # the release's Charades recipe (scripts/reproduce_paravt_8b.sh)
    },
}  # fmt: skip


def image_summary(url: str) -> dict[str, Any]:
    """Size, pixel hash and a 4 x 4 box thumbnail of a data-URL image (what the server decodes)."""
    from PIL import Image

    head, data = url.split(",", 1)
    image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    thumb = image.resize((4, 4), Image.Resampling.BOX)
    return {
        "format": head.split(";")[0].removeprefix("data:image/"),
        "size": list(image.size),
        "sha256": hashlib.sha256(image.tobytes()).hexdigest(),
        "thumb": list(thumb.tobytes()),
    }


def summarise_part(part: dict[str, Any]) -> dict[str, Any]:
    if part["type"] == "image_url":
        return {"type": "image", **image_summary(part["image_url"]["url"])}
    if part["type"] == "video_url":  # a file:// path on the recording machine: its name only
        return {"type": "video_url", "name": Path(part["video_url"]["url"]).name}
    return part


def summarise(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [summarise_part(p) for p in content]
        out.append({"role": message["role"], "content": content})
    return out


def tails(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each request's settings and the messages it adds to the one before (the driver only appends)."""
    out, before = [], []
    for r in requests:
        messages = r["messages"]
        if messages[: len(before)] != before:
            raise SystemExit("a request does not extend the one before it")
        out.append({"max_tokens": r["max_tokens"], "temperature": r["temperature"], "keeps": len(before),
                    "adds": summarise(messages[len(before):])})  # fmt: skip
        before = messages
    return out


class RecordingClient:
    """Stands in for ``openai.OpenAI``: records each request and answers the next scripted reply."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self._create))

    def _create(self, **kwargs: Any) -> Any:
        self.requests.append(copy.deepcopy(kwargs))
        text = self.replies.pop(0)
        message = types.SimpleNamespace(content=text)
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)])


def install_stubs(rows: dict[str, list[dict[str, Any]]]) -> None:
    """``datasets`` (one synthetic row per dataset) and ``openai`` (never called: the client is passed in)."""
    datasets = types.ModuleType("datasets")

    def load_dataset(hub_id: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return copy.deepcopy(rows[hub_id])

    datasets.load_dataset = load_dataset  # type: ignore[attr-defined]
    sys.modules["datasets"] = datasets
    openai = types.ModuleType("openai")
    openai.OpenAI = RecordingClient  # type: ignore[attr-defined]
    sys.modules["openai"] = openai


HUB = {
    "videomme": "lmms-lab/Video-MME",
    "videomme_wsub": "lmms-lab/Video-MME",
    "longvideobench": "longvideobench/LongVideoBench",
    "lvbench": "lmms-lab/LVBench",
    "mlvu": "sy1998/MLVU_dev",
    "mmvu": "yale-nlp/MMVU",
    "charades": "lmms-lab/charades_sta",
}


def record(release: Path, site: Path, commit: str, out: Path) -> None:
    os.environ["FORCE_QWENVL_VIDEO_READER"] = "torchcodec"  # the release's reader (requirements/eval.lock)
    sys.path[:0] = [str(release), str(site)]
    with tempfile.TemporaryDirectory() as tmp:
        hf_home = Path(tmp)
        video = hf_home / "v.mp4"
        events = [Event(s, c, a, b, tuple(box)) for s, c, a, b, box in VIDEO["events"]]
        write_video(video, events, VIDEO["seconds"], VIDEO["fps"], tuple(VIDEO["size"]))
        video_sha = hashlib.sha256(video.read_bytes()).hexdigest()
        os.environ["PARAVT_MLVU_VIDEO_DIR"] = str(hf_home / "MLVU" / "video")
        os.environ["PARAVT_MMVU_VIDEO_DIR"] = str(hf_home / "mmvu")
        out.mkdir(parents=True, exist_ok=True)
        for name, case in CASES.items():
            dataset = case.get("dataset", name)
            target = hf_home / case["release_video"]
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(video)
            if "srt" in case:
                (hf_home / case["srt"]).parent.mkdir(parents=True, exist_ok=True)
                (hf_home / case["srt"]).write_text(SRT, encoding="utf-8")
            install_stubs({HUB[dataset]: [case["row"]]})
            for mod in [m for m in sys.modules if m == "paravt" or m.startswith("paravt.")]:
                del sys.modules[mod]
            from paravt.eval import driver, utils

            mode = case.get("prompt_mode", "agentic_general")
            (sample,) = utils.load_samples(dataset, str(hf_home), prompt_mode=mode)
            replies = [*CALLS, case["reply"]] if mode.startswith("agentic_") else [case["reply"]]
            client = RecordingClient(replies)
            channel = case.get("video_channel", "image_url")
            result = driver.eval_one(client, "model", sample, nframes=64, max_turns=3, prompt_mode=mode,
                                     video_channel=channel)  # fmt: skip
            if "error" in result:
                raise SystemExit(f"{name}: the release's eval_one failed: {result['error']}")
            fixture = {
                "release": "EvolvingLMMs-Lab/ParaVT",
                "commit": commit,
                "recorded_by": "scripts/record_release_fixtures.py",
                "benchmark": name,
                "dataset": dataset,
                "prompt_mode": mode,
                "video_channel": channel,
                "video": {**VIDEO, "sha256": video_sha},
                "srt": SRT if "srt" in case else None,
                "row": case["row"],
                "media_root": case["media_root"],
                "replies": replies,
                "release_result": {k: result[k] for k in ("pred", "score", "tool_calls")},
                "requests": tails(client.requests),
            }
            path = out / f"{name}.json"
            path.write_text(json.dumps(fixture, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"{path}: {len(client.requests)} requests, release pred {result['pred']!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", type=Path, help="the release's source tree (the archive of --commit)")
    parser.add_argument("--commit", required=True, help="the 40-hex commit the tree was archived from")
    parser.add_argument("--site", type=Path, default=ROOT / ".venv-bench" / "site",
                        help="site holding qwen-vl-utils 0.0.14")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "release")
    args = parser.parse_args()
    if len(args.commit) != 40:
        parser.error("--commit must be the full 40-hex id")
    record(args.release, args.site, args.commit, args.out)


if __name__ == "__main__":
    main()
