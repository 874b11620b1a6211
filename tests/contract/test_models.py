"""Tiny Qwen3-VL: build, load, tokenizer, chat template, processor on a real mp4, forward/backward, generate."""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from paravt_core.modeling.chat_template import CHAT_TEMPLATE, WRAPPED_VIDEO_PLACEHOLDER
from paravt_core.modeling.tiny_tokenizer import ADDED_TOKENS, QWEN_ADDED_TOKENS
from paravt_core.models import Loaded, build_tiny_model, load, resolve_model_dir, to_processor_messages

SAVED_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
}


@pytest.fixture(scope="module")
def mp4(tmp_path_factory: pytest.TempPathFactory) -> str:
    """3 s of ffmpeg's test pattern, 128x96 at 4 fps: 12 frames, frame i shown at i/4 s."""
    path = tmp_path_factory.mktemp("video") / "testsrc.mp4"
    cmd = ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=128x96:rate=4"]
    subprocess.run([*cmd, "-t", "3", "-pix_fmt", "yuv420p", str(path)], check=True)
    return str(path)


def _video_messages(mp4: str, answer: str | None = None) -> list[dict]:
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "You are a video agent."}]},
        {
            "role": "user",
            "content": [
                {"type": "video_url", "video_url": {"url": mp4}},
                {"type": "text", "text": "What moves?"},
            ],
        },
    ]
    if answer is not None:
        messages.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return messages


def _encode(loaded: Loaded, messages: list[dict], add_generation_prompt: bool) -> dict:
    return loaded.processor.apply_chat_template(
        to_processor_messages(messages),
        tokenize=True,
        add_generation_prompt=add_generation_prompt,
        return_dict=True,
        return_tensors="pt",
    )


# --- build and load -------------------------------------------------------------------------------------


def test_build_saves_a_checkpoint_that_load_reads_back(tiny_model_dir: str, tiny_model: Loaded) -> None:
    assert {p.name for p in Path(tiny_model_dir).iterdir()} >= SAVED_FILES
    assert type(tiny_model.model).__name__ == "Qwen3VLForConditionalGeneration"
    assert type(tiny_model.processor).__name__ == "Qwen3VLProcessor"
    assert type(tiny_model.processor.video_processor).__name__ == "Qwen3VLVideoProcessor"
    assert type(tiny_model.processor.image_processor).__name__ == "Qwen2VLImageProcessor"
    assert tiny_model.tokenizer is tiny_model.processor.tokenizer
    assert tiny_model.path == str(Path(tiny_model_dir).resolve())
    assert not tiny_model.model.training

    n_params = sum(p.numel() for p in tiny_model.model.parameters())
    assert 250_000 <= n_params <= 1_000_000
    text, vision = tiny_model.config.text_config, tiny_model.config.vision_config
    assert (text.hidden_size, text.num_hidden_layers) == (64, 2)
    assert (vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size) == (16, 2, 2)
    # vocab padded to a multiple of 64 above the tokenizer size, as Qwen's 151936 > 151669
    assert (
        text.vocab_size % 64 == 0
        and len(tiny_model.tokenizer) <= text.vocab_size < len(tiny_model.tokenizer) + 64
    )
    ids = tiny_model.tokenizer.convert_tokens_to_ids
    assert tiny_model.config.video_token_id == ids("<|video_pad|>")
    assert tiny_model.config.image_token_id == ids("<|image_pad|>")
    assert tiny_model.config.vision_start_token_id == ids("<|vision_start|>")
    assert list(tiny_model.model.generation_config.eos_token_id) == [ids("<|im_end|>"), ids("<|endoftext|>")]


def test_build_is_deterministic_per_seed(tmp_path: Path, tiny_model_dir: str) -> None:
    again = Path(build_tiny_model(str(tmp_path / "again"), seed=0))
    for name in SAVED_FILES:
        assert (again / name).read_bytes() == (Path(tiny_model_dir) / name).read_bytes(), name
    # Readable by any uid (the images run as 10001; safetensors alone leaves the weights 0600).
    assert all((again / name).stat().st_mode & 0o444 == 0o444 for name in SAVED_FILES)
    other = Path(build_tiny_model(str(tmp_path / "other"), seed=1))
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()


def test_load_accepts_file_uri_and_dtype(tiny_model_dir: str) -> None:
    loaded = load("file://" + tiny_model_dir, dtype="bfloat16")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}


def test_load_prints_one_line_naming_its_purpose_and_no_transformers_bar(tiny_model_dir: str, capfd) -> None:
    """RL loads three copies of a model (trained, reference, rollout engine): each said "Loading weights"
    with a tqdm bar. Now each says one line naming which copy it is; the bars' setting is restored."""
    from transformers import AutoModelForImageTextToText
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    AutoModelForImageTextToText.from_pretrained(tiny_model_dir, local_files_only=True)
    assert "Loading weights" in capfd.readouterr().err  # what a bare load prints here, so the test can fail
    load(tiny_model_dir, dtype="bfloat16", purpose="frozen reference")
    out, err = capfd.readouterr()
    assert out == "" and "Loading weights" not in err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"frozen reference: loaded {Path(tiny_model_dir).resolve()} (")
    assert "K parameters, bfloat16, cpu) in " in lines[0]
    load(tiny_model_dir)
    assert capfd.readouterr().err == ""  # no purpose, no line
    assert hf_logging.is_progress_bar_enabled()


def test_load_errors_name_the_uri(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        resolve_model_dir(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load(str(tmp_path / "empty"))


# --- tokenizer ------------------------------------------------------------------------------------------


def test_added_tokens_are_single_ids_in_qwen_order(tiny_model: Loaded) -> None:
    tok = tiny_model.tokenizer
    first = tok.convert_tokens_to_ids("<|endoftext|>")
    for offset, (content, _) in enumerate(ADDED_TOKENS):
        ids = tok(content, add_special_tokens=False)["input_ids"]
        assert ids == [first + offset], content
    assert len(tok) == first + len(ADDED_TOKENS)
    assert (tok.eos_token, tok.pad_token, tok.bos_token, tok.unk_token) == (
        "<|im_end|>",
        "<|endoftext|>",
        None,
        None,
    )
    specials = {c for c, special in QWEN_ADDED_TOKENS if special}
    assert set(tok.all_special_tokens) == specials
    assert len(specials) == 14


def test_tokenizer_round_trips_tagged_text(tiny_model: Loaded) -> None:
    tok = tiny_model.tokenizer
    text = (
        "<|im_start|>assistant\n<think>\nCrop 0–10 s, café scene 🎬.\n</think>\n<tool_call>\n"
        '{"name": "crop_video", "arguments": {"video_path": "v.mp4", "start_time": 0, "end_time": 10}}\n'
        "</tool_call><answer>B</answer><|im_end|>"
    )
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    for tag in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>", "<|im_end|>"):
        assert ids.count(tok.convert_tokens_to_ids(tag)) == 1, tag
    # Only the <|...|> chat tokens are special: skipping them keeps the ParaVT tags (as in Qwen3).
    assert tok.decode(ids, skip_special_tokens=True) == text.removeprefix("<|im_start|>").removesuffix(
        "<|im_end|>"
    )
    # The tool-call JSON was in the training corpus, so it is far shorter than its byte count.
    call = '{"name": "crop_video", "arguments": {"video_path": "v.mp4", "start_time": 0, "end_time": 10}}'
    assert len(tok(call, add_special_tokens=False)["input_ids"]) < len(call) / 2.5


# --- chat template --------------------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "crop_video", "parameters": {"type": "object"}}}


def test_chat_template_renders_tool_conversation_exactly(tiny_model: Loaded) -> None:
    messages = [
        {"role": "system", "content": "You are a video agent."},
        {
            "role": "user",
            "content": [
                {"type": "video_url", "video_url": {"url": "/v.mp4"}},
                {"type": "text", "text": "When does the square move?"},
            ],
        },
        {
            "role": "assistant",
            "content": "<think>\nCheck two parts.\n</think>",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "crop_video", "arguments": {"start_time": 0, "end_time": 5}},
                },
                {"function": {"name": "crop_video", "arguments": '{"start_time": 5, "end_time": 10}'}},
            ],
        },
        {"role": "tool", "content": "A square on the left."},
        {"role": "tool", "content": [{"type": "text", "text": "The square moves right."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "<answer>B</answer>"}]},
    ]
    expected = (
        "<|im_start|>system\nYou are a video agent.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "crop_video", "parameters": {"type": "object"}}}\n'
        "</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<|video_pad|>When does the square move?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nCheck two parts.\n</think>\n"
        '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 0, "end_time": 5}}\n</tool_call>\n'
        '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 5, "end_time": 10}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nA square on the left.\n</tool_response>\n"
        "<tool_response>\nThe square moves right.\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<answer>B</answer><|im_end|>\n"
    )
    rendered = tiny_model.processor.apply_chat_template(messages, tools=[TOOL], tokenize=False)
    assert rendered == expected
    # The tokenizer carries the same template, so text-only callers render identically.
    assert tiny_model.tokenizer.apply_chat_template(messages, tools=[TOOL], tokenize=False) == expected


def test_chat_template_paravt_row_and_generation_prompt(tiny_model: Loaded) -> None:
    # ParaVT SFT rows: list-of-parts content everywhere, tool calls as plain text, responses in a user turn.
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "Sys."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<0.5 seconds>"},
                {"type": "image_url", "image_url": {"url": "/f0.jpg"}},
                {"type": "image", "image": "/f1.jpg"},
                {"type": "text", "text": "Q?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "<tool_call>\n{}\n</tool_call>"}]},
        {"role": "user", "content": [{"type": "text", "text": "<tool_response>\nok\n</tool_response>"}]},
    ]
    expected = (
        "<|im_start|>system\nSys.<|im_end|>\n"
        "<|im_start|>user\n<0.5 seconds><|vision_start|><|image_pad|><|vision_end|>"
        "<|vision_start|><|image_pad|><|vision_end|>Q?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert (
        tiny_model.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        == expected
    )
    without = tiny_model.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert without == expected.removesuffix("<|im_start|>assistant\n")


def test_chat_template_rejects_unknown_parts_and_roles(tiny_model: Loaded) -> None:
    render = tiny_model.processor.apply_chat_template
    with pytest.raises(Exception, match="unsupported content part type: audio"):
        render([{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}], tokenize=False)
    with pytest.raises(Exception, match="unsupported message role: critic"):
        render([{"role": "critic", "content": "x"}], tokenize=False)
    with pytest.raises(Exception, match="assistant messages cannot contain videos"):
        render([{"role": "assistant", "content": [{"type": "video", "video": "v.mp4"}]}], tokenize=False)


def test_to_processor_messages_converts_openai_media_parts() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {
            "role": "user",
            "content": [
                {"type": "video_url", "video_url": {"url": "/a.mp4"}},
                {"type": "image_url", "image_url": {"url": "/b.jpg"}},
                {"type": "text", "text": "t"},
            ],
        },
    ]
    out = to_processor_messages(messages)
    assert out[1]["content"] == [
        {"type": "video", "video": "/a.mp4"},
        {"type": "image", "image": "/b.jpg"},
        {"type": "text", "text": "t"},
    ]
    assert messages[1]["content"][0]["type"] == "video_url"  # input untouched
    with pytest.raises(ValueError, match="without a url"):
        to_processor_messages([{"role": "user", "content": [{"type": "video_url", "video_url": {}}]}])


# --- processor on real media ----------------------------------------------------------------------------


def test_processor_on_real_mp4(tiny_model: Loaded, mp4: str) -> None:
    inputs = _encode(tiny_model, _video_messages(mp4), add_generation_prompt=True)
    # fps 2 over 12 frames at 4 fps -> 6 frames (indices 0,2,4,7,9,11); 128x96 x 6 frames exceeds the
    # 65536-px budget by 73728/65536 -> frames resized to 64x96 -> grid (6/2, 64/16, 96/16).
    assert inputs["video_grid_thw"].tolist() == [[3, 4, 6]]
    assert tuple(inputs["pixel_values_videos"].shape) == (3 * 4 * 6, 3 * 2 * 16 * 16)
    # Timestamps are the mean of each 2-frame group: (0+0.5)/2, (1.0+1.75)/2, (2.25+2.75)/2 seconds.
    pad = "<|video_pad|>" * 6
    expected_video = "".join(
        f"<{t} seconds><|vision_start|>{pad}<|vision_end|>" for t in ("0.2", "1.4", "2.5")
    )
    text = tiny_model.tokenizer.decode(inputs["input_ids"][0])
    assert text == (
        "<|im_start|>system\nYou are a video agent.<|im_end|>\n"
        f"<|im_start|>user\n{expected_video}What moves?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = inputs["input_ids"][0]
    video_id = tiny_model.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert inputs["mm_token_type_ids"][0].tolist() == [2 if i == video_id else 0 for i in ids.tolist()]
    assert int((ids == video_id).sum()) == 18


def test_processor_on_image(tiny_model: Loaded) -> None:
    frame = Image.fromarray(np.full((64, 96, 3), 200, dtype=np.uint8))
    messages = [
        {"role": "user", "content": [{"type": "image", "image": frame}, {"type": "text", "text": "Hi"}]}
    ]
    inputs = tiny_model.processor.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    # 64x96 is on the 32-px grid and inside [32*32, 128*128] px: kept, 4x6 patches, 2x3 merged tokens.
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 6]]
    image_id = tiny_model.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert (
        inputs["mm_token_type_ids"][0].tolist().count(1)
        == 6
        == int((inputs["input_ids"][0] == image_id).sum())
    )
    # Pixel values, by hand: 24 patches of 3 x 2 x 16 x 16 = 1536 values (the frame repeated over the temporal
    # patch of 2), each (200 / 255 - mean 0.5) / std 0.5 = 0.568627...
    assert inputs["pixel_values"].shape == (24, 1536)
    torch.testing.assert_close(
        inputs["pixel_values"], torch.full((24, 1536), (200 / 255 - 0.5) / 0.5), rtol=0, atol=1e-6
    )
    with torch.no_grad():
        logits = tiny_model.model(**inputs).logits
    ids = inputs["input_ids"]
    assert logits.shape == (1, ids.shape[1], tiny_model.config.text_config.vocab_size)
    # Values, worked out by another path: attention is causal and text positions before the image are
    # 0..k-1 in all three rope sections, so the logits before the first image token equal a text-only
    # forward of that prefix ("<|im_start|>user\n<|vision_start|>").
    k = int((ids[0] == image_id).nonzero()[0])
    with torch.no_grad():
        prefix = tiny_model.model(input_ids=ids[:, :k], attention_mask=torch.ones_like(ids[:, :k])).logits
    torch.testing.assert_close(logits[:, :k], prefix, rtol=1e-5, atol=1e-5)
    # ...and the image reaches every later position: a darker frame (10) changes all of them, none before.
    dark = {**inputs, "pixel_values": torch.full_like(inputs["pixel_values"], (10 / 255 - 0.5) / 0.5)}
    with torch.no_grad():
        other = tiny_model.model(**dark).logits
    assert torch.equal(other[:, :k], logits[:, :k])
    assert (other[0, k:] - logits[0, k:]).abs().amax(dim=-1).min() > 0


def test_real_checkpoint_template_is_unnested_by_load(tmp_path: Path, tiny_model_dir: str, mp4: str) -> None:
    # A checkpoint whose template wraps the video pad in vision markers, as Qwen3-VL's own template does.
    real_like = tmp_path / "real_like"
    shutil.copytree(tiny_model_dir, real_like)
    wrapped = CHAT_TEMPLATE.replace("'<|video_pad|>'", f"'{WRAPPED_VIDEO_PLACEHOLDER}'")
    assert wrapped != CHAT_TEMPLATE
    (real_like / "chat_template.jinja").write_text(wrapped)

    loaded = load(str(real_like))
    rendered = loaded.processor.apply_chat_template(_video_messages(mp4), tokenize=False)
    assert "<|im_start|>user\n<|video_pad|>What moves?" in rendered
    start_id = loaded.tokenizer.convert_tokens_to_ids("<|vision_start|>")
    fixed = _encode(loaded, _video_messages(mp4), add_generation_prompt=True)
    assert int((fixed["input_ids"][0] == start_id).sum()) == 3  # one per temporal group

    # Without the fix, transformers 5.x nests the markers: one extra outer <|vision_start|>.
    loaded.processor.chat_template = wrapped
    nested = _encode(loaded, _video_messages(mp4), add_generation_prompt=True)
    assert int((nested["input_ids"][0] == start_id).sum()) == 4


# --- training and generation ----------------------------------------------------------------------------


def test_forward_backward_reaches_language_and_vision_params(tiny_model_dir: str, mp4: str) -> None:
    loaded = load(tiny_model_dir)  # own copy: this test trains
    model = loaded.model
    model.train()
    inputs = _encode(loaded, _video_messages(mp4, answer="<answer>B</answer>"), add_generation_prompt=False)
    labels = inputs["input_ids"].clone()
    im_start = loaded.tokenizer.convert_tokens_to_ids("<|im_start|>")
    last_turn = int((labels[0] == im_start).nonzero()[-1])
    labels[0, : last_turn + 3] = -100  # train only on the assistant reply (after "<|im_start|>assistant\n")

    timings = []
    for _ in range(3):  # first pass warms up kernels; report the best of the rest
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        loss = model(**inputs, labels=labels).loss
        loss.backward()
        timings.append(time.perf_counter() - start)
    print(
        f"\n[tiny-model] forward+backward ({inputs['input_ids'].shape[1]} tokens, 3x64x96 video): {min(timings[1:]):.3f} s"
    )

    # Weights start near zero (std 0.02), so the logits are nearly uniform: loss ~ ln(vocab).
    assert math.isfinite(loss.item())
    assert abs(loss.item() - math.log(loaded.config.text_config.vocab_size)) < 0.5
    groups = (
        "model.visual.patch_embed",
        "model.visual.pos_embed",
        "model.visual.blocks.0",
        "model.visual.blocks.1",
        "model.visual.merger",
        "model.visual.deepstack_merger_list.0",
        "model.language_model.embed_tokens",
        "model.language_model.layers.0",
        "model.language_model.layers.1",
        "lm_head",
    )
    grads = {n: p.grad for n, p in model.named_parameters()}
    for group in groups:
        members = [g for n, g in grads.items() if n.startswith(group)]
        assert members, group
        assert all(g is not None and torch.isfinite(g).all() for g in members), group
        assert any(float(g.abs().sum()) > 0 for g in members), group


def test_generate_is_greedy_deterministic(tiny_model: Loaded, mp4: str) -> None:
    inputs = _encode(tiny_model, _video_messages(mp4), add_generation_prompt=True)
    prompt_len = inputs["input_ids"].shape[1]
    start = time.perf_counter()
    with torch.no_grad():
        out = tiny_model.model.generate(**inputs, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    print(
        f"\n[tiny-model] generate 32 tokens after a {prompt_len}-token video prompt: {time.perf_counter() - start:.3f} s"
    )
    generated = out[0, prompt_len:].tolist()
    assert torch.equal(out[0, :prompt_len], inputs["input_ids"][0])

    # Independent greedy loop: the full sequence through the model at every step (no cache), argmax of the
    # last position's logits, eos masked out as min_new_tokens does.
    eos = tiny_model.model.generation_config.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    step_inputs = dict(inputs)
    expected = []
    with torch.no_grad():
        for _ in range(32):
            logits = tiny_model.model(**step_inputs).logits[0, -1].float()
            logits[eos_ids] = float("-inf")
            token = int(torch.argmax(logits))
            expected.append(token)
            grow = torch.tensor([[token]])
            step_inputs["input_ids"] = torch.cat([step_inputs["input_ids"], grow], dim=1)
            step_inputs["attention_mask"] = torch.cat(
                [step_inputs["attention_mask"], torch.ones_like(grow)], dim=1
            )
            if "mm_token_type_ids" in step_inputs:
                step_inputs["mm_token_type_ids"] = torch.cat(
                    [step_inputs["mm_token_type_ids"], torch.zeros_like(grow)], dim=1
                )
    assert generated == expected


# --- s3 -------------------------------------------------------------------------------------------------


def test_load_from_s3_caches_until_the_checkpoint_changes(
    s3_bucket: str, tiny_model_dir: str, tiny_model: Loaded, tmp_path: Path
) -> None:
    from paravt_core import storage

    uri = f"{s3_bucket}/checkpoints/tiny"
    storage.upload_dir(tiny_model_dir, uri)
    cache = tmp_path / "cache"

    first = load(uri, cache_dir=cache)
    assert Path(first.path) == (cache / "s3" / uri.removeprefix("s3://")).resolve()
    expected = dict(tiny_model.model.state_dict())
    assert all(torch.equal(v, expected[k]) for k, v in first.model.state_dict().items())

    # Unchanged remote: the cached copy is reused, not downloaded again.
    marker_mtime = (Path(first.path) / ".paravt_download_complete").stat().st_mtime_ns
    again = load(uri + "/", cache_dir=cache)
    assert again.path == first.path
    assert (Path(first.path) / ".paravt_download_complete").stat().st_mtime_ns == marker_mtime

    # Overwritten remote weights (another seed): the next load fetches them.
    other = Path(build_tiny_model(str(tmp_path / "seed1"), seed=1))
    storage.upload_file(str(other / "model.safetensors"), f"{uri}/model.safetensors")
    changed = load(uri, cache_dir=cache)
    reference = load(str(other))
    assert all(torch.equal(v, reference.model.state_dict()[k]) for k, v in changed.model.state_dict().items())

    with pytest.raises(FileNotFoundError, match="no objects"):
        load(f"{s3_bucket}/checkpoints/missing", cache_dir=cache)
