"""Hand-built SFT rows shared by the SFT tests (fixtures: ``tests/fixtures/sft.py``)."""

from __future__ import annotations

SYSTEM = "You are a video agent."
CALL_1 = '<tool_call>\n{"name": "crop_video", "arguments": {"video_path": "v.mp4", "start_time": 0, "end_time": 2}}\n</tool_call>'
CALL_2 = '<tool_call>\n{"name": "crop_video", "arguments": {"video_path": "v.mp4", "start_time": 2, "end_time": 4}}\n</tool_call>'
TURN_1 = f"<think>Two halves in parallel.</think>\n{CALL_1}\n{CALL_2}"
RESPONSES = "<tool_response>\na red circle\n</tool_response>\n<tool_response>\nnothing\n</tool_response>"
FINAL = "<think>The circle is red.</think>\n<answer>red</answer>"


def text(t: str) -> dict:
    return {"type": "text", "text": t}


def multi_call_row() -> list[dict]:
    """System, question, a turn with two parallel calls, their responses, the answer."""
    return [
        {"role": "system", "content": [text(SYSTEM)]},
        {"role": "user", "content": [text("Which colour is the circle?")]},
        {"role": "assistant", "content": [text(TURN_1)]},
        {"role": "user", "content": [text(RESPONSES)]},
        {"role": "assistant", "content": [text(FINAL)]},
    ]


def image_row(path: str) -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": path}}, text("Colour?")]},
        {"role": "assistant", "content": [text("<answer>red</answer>")]},
    ]


def video_row(path: str, answer: str = "A") -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "video_url", "video_url": {"url": path}}, text("Q")]},
        {"role": "assistant", "content": [text(f"<answer>{answer}</answer>")]},
    ]


def fp64_three_samples(model_dir: str, image: str):  # noqa: ANN201 - (model, PackedBatch)
    """The tiny model at ``model_dir`` in float64 and one pack of three samples (an image row, the two-call
    row, the image row again: two images), for exact comparisons of attention paths."""
    from paravt_core.models import load
    from paravt_core.sft.inputs import encode_row
    from paravt_core.sft.packing import pack

    loaded = load(model_dir)
    model = loaded.model.double()
    rows = [image_row(image), multi_call_row(), image_row(image)]
    samples = [encode_row(r, loaded.processor, loaded.config, index=i) for i, r in enumerate(rows)]
    for s in samples:
        if s.pixel_values is not None:
            s.pixel_values = s.pixel_values.double()
    batch = pack(samples)
    assert len(batch.lengths) == 3 and batch.image_grid_thw.shape[0] == 2
    return model, batch
