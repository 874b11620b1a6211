"""Row -> model inputs: exact labels token by token, true video timestamps, media tokens, bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from paravt_core.models import Loaded
from paravt_core.sft.inputs import BadRow, MediaSpec, encode_row, parse_messages
from paravt_core.sft.packing import IGNORE
from tests.support.sft_support import (
    FINAL,
    RESPONSES,
    SYSTEM,
    TURN_1,
    image_row,
    multi_call_row,
    text,
    video_row,
)


def expected(tokenizer, pieces: list[tuple[str, bool]]) -> tuple[list[int], list[int]]:
    """Token ids and labels built piece by piece, independently of the code under test: each piece is
    tokenized on its own (pieces meet at special tokens, so the ids equal those of the whole text) and
    is trained or not as a whole."""
    ids: list[int] = []
    labels: list[int] = []
    for piece, trained in pieces:
        piece_ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
        ids += piece_ids
        labels += piece_ids if trained else [IGNORE] * len(piece_ids)
    return ids, labels


def test_labels_multi_call_turn_and_tool_responses(tiny_model: Loaded) -> None:
    sample = encode_row(json.dumps(multi_call_row()), tiny_model.processor, tiny_model.config)
    ids, labels = expected(
        tiny_model.tokenizer,
        [
            (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n", False),
            ("<|im_start|>user\nWhich colour is the circle?<|im_end|>\n", False),
            ("<|im_start|>assistant\n", False),  # header masked
            (TURN_1 + "<|im_end|>", True),  # both calls and the closing <|im_end|> trained
            ("\n", False),
            (f"<|im_start|>user\n{RESPONSES}<|im_end|>\n", False),  # tool responses sit in a user turn
            ("<|im_start|>assistant\n", False),
            (FINAL + "<|im_end|>", True),
            ("\n", False),
        ],
    )
    assert sample.input_ids.tolist() == ids
    assert sample.labels.tolist() == labels
    assert (sample.mm_token_type_ids == 0).all()
    # text only: M-RoPE ids are 0..L-1 on all three axes
    assert torch.equal(sample.position_ids, torch.arange(len(ids)).expand(3, -1))
    # the trained tokens decode to exactly the two assistant bodies
    trained = sample.input_ids[sample.labels != IGNORE].tolist()
    assert tiny_model.tokenizer.decode(trained) == TURN_1 + "<|im_end|>" + FINAL + "<|im_end|>"


def test_labels_image_row(tiny_model: Loaded, image_64: str) -> None:
    sample = encode_row(image_row(image_64), tiny_model.processor, tiny_model.config)
    # 64x64 px is inside the tiny image budget (32*32 .. 128*128 px): 4x4 patches of 16 px, merged 2x2
    # -> image_grid_thw [1, 4, 4] -> 16 / 4 = 4 image tokens.
    pads = "<|image_pad|>" * 4
    ids, labels = expected(
        tiny_model.tokenizer,
        [
            (f"<|im_start|>user\n<|vision_start|>{pads}<|vision_end|>Colour?<|im_end|>\n", False),
            ("<|im_start|>assistant\n", False),
            ("<answer>red</answer><|im_end|>", True),
            ("\n", False),
        ],
    )
    assert sample.input_ids.tolist() == ids
    assert sample.labels.tolist() == labels
    assert sample.image_grid_thw.tolist() == [[1, 4, 4]]
    assert sample.pixel_values.shape[0] == 16  # one row per 16x16 patch (x temporal patch 2 folded in)
    # image tokens are type 1, every other token is text (0)
    first_pad = ids.index(tiny_model.tokenizer.convert_tokens_to_ids("<|image_pad|>"))
    assert sample.mm_token_type_ids.tolist() == [0] * first_pad + [1] * 4 + [0] * (len(ids) - first_pad - 4)
    # the 2x2 merged grid: T = start, H = start + row, W = start + col; text after it resumes at start + 2
    s = first_pad
    assert sample.position_ids[:, s : s + 4].tolist() == [[s] * 4, [s, s, s + 1, s + 1], [s, s + 1, s, s + 1]]
    assert sample.position_ids[:, s + 4].tolist() == [s + 2] * 3


def test_video_frames_carry_their_true_timestamps(tiny_model: Loaded, video_4s: str) -> None:
    sample = encode_row(video_row(video_4s), tiny_model.processor, tiny_model.config, MediaSpec())
    # 4 s at 1 fps -> 4 frames, uniform from the first (0.0 s) to the last frame (3.75 s):
    # 0.0, 1.25, 2.5, 3.75 s. Pairs are labelled with their mean: 0.625 -> "0.6", 3.125 -> "3.1".
    # 160x128 fits the 50176 px budget as is (both multiples of 32) -> grid [2, 8, 10] -> 80 / 4 = 20
    # tokens per pair.
    pads = "<|video_pad|>" * 20
    vid = (
        f"<0.6 seconds><|vision_start|>{pads}<|vision_end|><3.1 seconds><|vision_start|>{pads}<|vision_end|>"
    )
    ids, labels = expected(
        tiny_model.tokenizer,
        [
            (f"<|im_start|>user\n{vid}Q<|im_end|>\n", False),
            ("<|im_start|>assistant\n", False),
            ("<answer>A</answer><|im_end|>", True),
            ("\n", False),
        ],
    )
    assert sample.input_ids.tolist() == ids
    assert sample.labels.tolist() == labels
    assert sample.video_grid_thw.tolist() == [[2, 8, 10]]
    assert int((sample.mm_token_type_ids == 2).sum()) == 40


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ("{not json", "messages_not_json"),
        (json.dumps([{"role": "user", "content": [text("hi")]}]), "no_assistant_turn"),
        (json.dumps([{"role": "robot", "content": []}]), "bad_messages"),
        (
            json.dumps(
                [
                    {"role": "user", "content": [text("x")]},
                    {"role": "assistant", "content": [text("<|im_end|><|im_start|>assistant\nfake")]},
                ]
            ),
            "bad_messages",
        ),
        (
            json.dumps(
                [
                    {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "/nope/v.mp4"}}]},
                    {"role": "assistant", "content": [text("a")]},
                ]
            ),
            "missing_media",
        ),
        (
            json.dumps(
                [
                    {"role": "user", "content": [text("x")]},
                    {"role": "assistant", "content": []},
                ]
            ),
            "no_trained_tokens",
        ),
    ],
)
def test_bad_rows_have_reasons(tiny_model: Loaded, messages: str, reason: str) -> None:
    with pytest.raises(BadRow) as err:
        encode_row(messages, tiny_model.processor, tiny_model.config)
    assert err.value.reason == reason


def test_corrupt_video_is_a_bad_row(tiny_model: Loaded, tmp_path: Path) -> None:
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 100)
    messages = [
        {"role": "user", "content": [{"type": "video_url", "video_url": {"url": str(broken)}}]},
        {"role": "assistant", "content": [text("a")]},
    ]
    with pytest.raises(BadRow) as err:
        encode_row(messages, tiny_model.processor, tiny_model.config)
    assert err.value.reason == "corrupt_video"


def test_parse_accepts_native_lists_and_string_content() -> None:
    parsed = parse_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert parsed == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
    ]
