"""Do the pixels reach the model? The SFT loss of one image+video sample, with its real and shuffled pixels.

Runs the training loss (``paravt_core.sft.packing.token_losses``, the path SFT and the RL learner train
through) on one sample holding two images and a short video, then again with the patch rows of every image
and video permuted (same shapes, other pixels). A model that sees the media gives two different losses; one
that drops them (transformers 5.17's ``Qwen3VLModel.forward`` ignores ``mm_encoder_outputs``) gives the same
number twice. Also records what the installed ``Qwen3VLModel.forward`` itself does with pre-encoded media
(``native``: its loss with real and shuffled media handed over as ``mm_encoder_outputs``), and the versions.

    python scripts/pixels_probe.py [--model tiny|DIR] [--work build/pixels-probe] [--out DIR]

Writes ``<out>/pixels-probe.json``; exits 1 when the training loss does not change with the pixels.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# |loss(real) - loss(shuffled)| per target token below this: the media did not reach the model (a dropped
# path gives exactly 0; the tiny random model moves by ~1e-3, a 2B-shaped one by more)
MIN_GAP = 1e-6


def versions() -> dict[str, Any]:
    import torch
    import transformers

    out: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__}
    out["transformers"] = transformers.__version__
    out["cuda"] = torch.version.cuda if torch.cuda.is_available() else None
    out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    try:
        import sglang  # noqa: F401 - only its version

        out["sglang"] = getattr(sglang, "__version__", "unknown")
    except Exception as err:  # not installed (CPU machine, SFT image) or not importable here
        out["sglang"] = f"absent ({type(err).__name__})"
    return out


def _media(tmp: Path) -> tuple[list[str], str]:
    """Two 64x64 noise images and a 2 s, 4 fps 64x64 noise video (seeded), written under ``tmp``."""
    import av
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images = []
    for i in range(2):
        path = tmp / f"image{i}.png"
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)
        images.append(str(path))
    video = tmp / "video.mp4"
    with av.open(str(video), "w") as out:
        stream = out.add_stream("mpeg4", rate=4)
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        for _ in range(8):
            frame = av.VideoFrame.from_ndarray(
                rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), format="rgb24"
            )
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return images, str(video)


def sample(loaded: Any, tmp: Path) -> Any:
    from paravt_core.sft.inputs import MediaSpec, encode_messages

    images, video = _media(tmp)
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": images[0]},
                {"type": "video", "video": video},
                {"type": "image", "image": images[1]},
                {"type": "text", "text": "What changes between the two pictures?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "The noise pattern and its colours."}]},
    ]
    spec = MediaSpec(video_min_frames=4, video_max_frames=4, video_fps=2.0, video_max_pixels=64 * 64)
    return encode_messages(messages, loaded.processor, loaded.model.config, spec)


def _shuffled(batch: Any) -> Any:
    import dataclasses

    import torch

    gen = torch.Generator().manual_seed(1)
    out = dataclasses.replace(batch)
    for name in ("pixel_values", "pixel_values_videos"):
        value = getattr(batch, name)
        setattr(out, name, value[torch.randperm(value.shape[0], generator=gen)])
    return out


def losses(model: Any, batch: Any) -> dict[str, float]:
    """Mean loss per target token: our training path and the installed ``Qwen3VLModel.forward``'s own."""
    import inspect

    import torch

    from paravt_core.sft.packing import PackedLoss, encode_media
    from paravt_core.train.logprobs import target_logprobs

    native = "mm_encoder_outputs" in inspect.signature(type(model.model).forward).parameters
    out: dict[str, Any] = {"native_mm_encoder_outputs": native}
    for name, b in (("real", batch), ("shuffled", _shuffled(batch))):
        with torch.no_grad():
            out[name] = float(PackedLoss(model)(b)) / b.loss_tokens
            # what Qwen3VLModel.forward does with pre-encoded media (5.17 drops them into **kwargs)
            encoded, _ = encode_media(model, b)
            keep = b.target_positions()
            inputs = {k: v for k, v in b.model_inputs().items() if not k.startswith("pixel_values")}
            hidden = model.model(**inputs, use_cache=False, mm_encoder_outputs=encoded)[0][0][keep]
            logp = target_logprobs(hidden, model.lm_head.weight, b.targets[0][keep])
            out[f"native_{name}"] = float(-logp.sum()) / b.loss_tokens
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="tiny", help="'tiny' (built under --work) or a model directory")
    parser.add_argument("--work", default="build/pixels-probe", help="where the tiny model is built")
    parser.add_argument("--out", default="build/pixels-probe", help="folder of pixels-probe.json")
    args = parser.parse_args(argv)

    import torch

    from paravt_core.models import build_tiny_model, load
    from paravt_core.sft.packing import pack

    report: dict[str, Any] = {"versions": versions()}
    model_dir = build_tiny_model(str(Path(args.work) / "tiny")) if args.model == "tiny" else args.model
    loaded = load(model_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = loaded.model.to(device, dtype).eval()
    with tempfile.TemporaryDirectory() as tmp:
        batch = pack([sample(loaded, Path(tmp))]).to(device, dtype)
    report["model"] = {"dir": str(model_dir), "device": device, "dtype": str(dtype).removeprefix("torch.")}
    report["media_tokens"] = {
        "image": int((batch.mm_token_type_ids == 1).sum()),
        "video": int((batch.mm_token_type_ids == 2).sum()),
    }
    report["loss"] = losses(model, batch)
    gap = abs(report["loss"]["real"] - report["loss"]["shuffled"])
    native_gap = abs(report["loss"]["native_real"] - report["loss"]["native_shuffled"])
    report["pixels_matter"] = gap > MIN_GAP
    report["native_pixels_matter"] = native_gap > MIN_GAP
    report["gap"], report["native_gap"] = gap, native_gap
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pixels-probe.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    verdict = "PASS" if report["pixels_matter"] else "FAIL"
    print(f"pixels-probe {verdict}: transformers {report['versions']['transformers']}, "
          f"loss real {report['loss']['real']:.6f} vs shuffled {report['loss']['shuffled']:.6f}")  # fmt: skip
    return 0 if report["pixels_matter"] else 1


if __name__ == "__main__":
    sys.exit(main())
