"""One ParaVT SFT row -> one :class:`~paravt_core.sft.packing.Sample` (token ids, labels, media, M-RoPE ids).

The row's ``messages`` (a JSON string or a native list, docs/method.md §2.3) are rendered with the checkpoint's chat
template; video parts are decoded by :mod:`paravt_core.video` (``fps`` frames per second, between
``min_frames`` and ``max_frames``, uniform over the whole video, each frame fitted to the pixel budget on
the 32-px grid) and handed to the processor *with their true timestamps*, so the ``<t seconds>`` labels it
writes are the times of the frames the model sees; image parts are loaded with PIL and sized by the image
processor. The processor expands the media placeholders and tokenizes.

Labels (docs/method.md §6): only assistant turns are trained, without their ``<|im_start|>assistant\\n`` header and
with their closing ``<|im_end|>``; system and user turns (including ``<tool_response>`` text, which sits in
user turns) and every image/video token are masked. The trained span of each assistant turn is found on the
token offsets of the expanded text, so it is exact whatever the tokenizer merges.

Anything wrong with a row raises :class:`BadRow` with a short ``reason`` (counted by the trainer, which goes
on with the next row).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch

from paravt_core.sft.packing import IGNORE, Sample, mrope_position_ids

ASSISTANT_HEADER = "<|im_start|>assistant\n"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"
# Turn delimiters inside message text would let a user turn fake an assistant turn (and its labels).
_DELIMITERS = (TURN_START, TURN_END)
ROLES = ("system", "user", "assistant")

# Reasons a row is skipped (keys of the ``dropped`` counts in metrics.json).
REASONS = (
    "messages_not_json",
    "bad_messages",
    "no_assistant_turn",
    "missing_media",
    "corrupt_video",
    "corrupt_image",
    "no_trained_tokens",
    "too_long",
    "processing_error",
)


class BadRow(Exception):
    """A row that cannot be trained on; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class MediaSpec:
    """How media parts are turned into pixels (defaults: docs/method.md §6)."""

    video_fps: float = 1.0
    video_min_frames: int = 4
    video_max_frames: int = 64
    video_min_pixels: int = 784
    video_max_pixels: int = 50176
    image_min_pixels: int = 784
    image_max_pixels: int = 50176


# ------------------------------------------------------------------------------------------ messages


def parse_messages(value: Any) -> list[dict]:
    """``messages`` as a list of ``{"role", "content": [part, ...]}`` (JSON string or native list)."""
    if isinstance(value, (bytes, str)):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as err:
            raise BadRow("messages_not_json", f"messages is not valid JSON ({err})") from None
    if not isinstance(value, list) or not value:
        raise BadRow("bad_messages", "messages must be a non-empty list")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise BadRow("bad_messages", f"message {i} has no role in {ROLES}")
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise BadRow("bad_messages", f"message {i}: content must be a list of parts")
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise BadRow("bad_messages", f"message {i}: text part without text")
                if any(d in text for d in _DELIMITERS):
                    raise BadRow("bad_messages", f"message {i}: text contains a turn delimiter")
                parts.append({"type": "text", "text": text})
            elif kind in ("video_url", "image_url", "video", "image"):
                media = kind.removesuffix("_url")
                if message["role"] != "user":
                    raise BadRow("bad_messages", f"message {i}: {media} in a {message['role']} turn")
                ref = part.get(kind)
                url = ref.get("url") if isinstance(ref, dict) else ref
                if not isinstance(url, str) or not url:
                    raise BadRow("bad_messages", f"message {i}: {kind} part without a url")
                parts.append({"type": media, media: url})
            else:
                raise BadRow("bad_messages", f"message {i}: unsupported part type {kind!r}")
        out.append({"role": message["role"], "content": parts})
    if not any(m["role"] == "assistant" for m in out):
        raise BadRow("no_assistant_turn", "no assistant turn to train on")
    return out


def media_parts(messages: list[dict]) -> list[tuple[str, str]]:
    """``(kind, url)`` of every image/video part in prompt order."""
    return [
        (p["type"], p[p["type"]]) for m in messages for p in m["content"] if p["type"] in ("image", "video")
    ]


# ------------------------------------------------------------------------------------------ media


def load_video(url: str, spec: MediaSpec) -> tuple[torch.Tensor, Any]:
    """Frames (T x C x H x W uint8) and the ``VideoMetadata`` that makes the processor label them with
    their true times."""
    from transformers.video_utils import VideoMetadata

    from paravt_core import video
    from paravt_core.video.sampling import crop_frame_count

    try:
        info = video.probe(url)
        span = max(0.0, info.duration - info.start_time)
        k = crop_frame_count(
            0.0,
            span,
            fps=spec.video_fps,
            min_frames=spec.video_min_frames,
            max_frames=spec.video_max_frames,
        )
        frames = video.overview(
            url, k, max_pixels=spec.video_max_pixels, min_pixels=spec.video_min_pixels, reuse=False
        )
    except video.VideoNotFoundError as err:
        raise BadRow("missing_media", str(err)) from None
    except (video.VideoError, ValueError) as err:
        raise BadRow("corrupt_video", f"{url}: {err}") from None
    # The processor labels frame pairs with index / fps; fps = 1 and the true timestamps as "indices" make
    # those labels the real presentation times (exact for variable frame rates too).
    metadata = VideoMetadata(
        total_num_frames=len(frames),
        fps=1.0,
        frames_indices=list(frames.timestamps),
        duration=info.duration,
        width=int(frames.frames.shape[-1]),
        height=int(frames.frames.shape[-2]),
    )
    return frames.frames, metadata


def load_image(url: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    from paravt_core import storage

    try:
        path = storage.local_copy(url) if url.startswith("s3://") else url.removeprefix("file://")
        if not os.path.isfile(path):
            raise FileNotFoundError(url)
        with Image.open(path) as im:
            return im.convert("RGB")
    except FileNotFoundError:
        raise BadRow("missing_media", f"image {url} does not exist") from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise BadRow("corrupt_image", f"{url}: {err}") from None


# ------------------------------------------------------------------------------------------ labels


def assistant_labels(
    input_ids: torch.Tensor, offsets: torch.Tensor, mm_token_type_ids: torch.Tensor, tokenizer: Any
) -> torch.Tensor:
    """Labels for one sequence: the token id inside assistant turns (header excluded, ``<|im_end|>``
    included), IGNORE elsewhere. ``offsets``: (L, 2) character spans of the tokens in the expanded text."""
    start_id = tokenizer.convert_tokens_to_ids(TURN_START)
    end_id = tokenizer.convert_tokens_to_ids(TURN_END)
    ids = input_ids.tolist()
    labels = torch.full_like(input_ids, IGNORE)
    starts = [i for i, t in enumerate(ids) if t == start_id]
    for a in starts:
        # The role name and its newline are a few tokens at most; decode just those.
        head = tokenizer.decode(ids[a : a + 12], skip_special_tokens=False)
        if not head.startswith(ASSISTANT_HEADER):
            continue
        content_from = int(offsets[a][0]) + len(ASSISTANT_HEADER)
        b = next((j for j in range(a + 1, len(ids)) if ids[j] in (end_id, start_id)), len(ids))
        last = b if b < len(ids) and ids[b] == end_id else b - 1  # an unclosed turn trains to its end
        for j in range(a + 1, last + 1):
            if int(offsets[j][0]) >= content_from:
                labels[j] = ids[j]
    labels[mm_token_type_ids != 0] = IGNORE
    return labels


# ------------------------------------------------------------------------------------------ rows


def encode_messages(
    messages: list[dict],
    processor: Any,
    model_config: Any,
    spec: MediaSpec = MediaSpec(),
    *,
    index: int = -1,
    row_id: str = "",
) -> Sample:
    """Messages (already checked by :func:`parse_messages`) -> a :class:`Sample`."""
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    images, videos, metadata = [], [], []
    for kind, url in media_parts(messages):
        if kind == "image":
            images.append(load_image(url))
        else:
            frames, meta = load_video(url, spec)
            videos.append(frames)
            metadata.append(meta)
    kwargs: dict[str, Any] = {}
    if images:
        kwargs["images"] = images
        kwargs["images_kwargs"] = {
            "size": {"shortest_edge": spec.image_min_pixels, "longest_edge": spec.image_max_pixels}
        }
    if videos:
        kwargs["videos"] = videos
        # Frames are already sampled and sized on the grid by paravt_core.video: the processor keeps them.
        kwargs["videos_kwargs"] = {
            "video_metadata": metadata,
            "do_sample_frames": False,
            "do_resize": False,
            "cap_pixels_per_frame": False,
        }
    out = processor(text=[text], return_tensors="pt", return_offsets_mapping=True, **kwargs)
    input_ids = out["input_ids"][0]
    mm = out["mm_token_type_ids"][0]
    labels = assistant_labels(input_ids, out["offset_mapping"][0], mm, processor.tokenizer)
    end_id = processor.tokenizer.convert_tokens_to_ids(TURN_END)
    trained = labels[1:]
    if not bool(((trained != IGNORE) & (trained != end_id)).any()):
        raise BadRow("no_trained_tokens", "no assistant token to learn besides turn ends")
    image_grid = out.get("image_grid_thw")
    video_grid = out.get("video_grid_thw")
    return Sample(
        input_ids=input_ids,
        labels=labels,
        mm_token_type_ids=mm,
        position_ids=mrope_position_ids(model_config, input_ids, mm, image_grid, video_grid),
        pixel_values=out.get("pixel_values"),
        image_grid_thw=image_grid,
        pixel_values_videos=out.get("pixel_values_videos"),
        video_grid_thw=video_grid,
        index=index,
        row_id=row_id,
    )


def encode_row(
    messages: Any,
    processor: Any,
    model_config: Any,
    spec: MediaSpec = MediaSpec(),
    *,
    index: int = -1,
    row_id: str = "",
) -> Sample:
    """A raw ``messages`` value (JSON string or list) -> a :class:`Sample`, or :class:`BadRow`."""
    parsed = parse_messages(messages)
    try:
        return encode_messages(parsed, processor, model_config, spec, index=index, row_id=row_id)
    except BadRow:
        raise
    except Exception as err:  # the processor or template refusing a row must not stop training
        raise BadRow("processing_error", f"{type(err).__name__}: {err}") from None
