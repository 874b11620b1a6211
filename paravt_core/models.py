"""Load a Qwen3-VL model + processor by URI, and build the tiny Qwen3-VL used by tests and the demo.

``load(uri)`` takes a local directory, an ``s3://`` prefix (downloaded once into a cache) or a hub id, and
goes through the same ``AutoProcessor`` / ``AutoModelForImageTextToText`` path for the tiny model and for a
real checkpoint such as Qwen/Qwen3-VL-8B-Instruct. It never touches the network for local or s3 URIs.

Tiny model (``build_tiny_model``), transformers 5.19 ``Qwen3VLForConditionalGeneration``:
  text: hidden 64, 2 layers, 2 query heads x head_dim 32, 1 KV head, MLP 128, interleaved M-RoPE
        sections [6, 5, 5], vocab = tokenizer size rounded up to a multiple of 64, untied lm_head (as 8B);
  vision: depth 2, hidden 32, 2 heads, MLP 64, patch 16, temporal patch 2, spatial merge 2 (the real
        grid: one LLM token per 32x32 pixels per 2 frames), 256 position embeddings, deepstack at layer 0;
  ~0.3M parameters, float32, ~1.3 MB on disk.
  tokenizer: byte-level BPE (see ``paravt_core.modeling.tiny_tokenizer``) with every Qwen3-VL added token
        in Qwen's order and flags, plus ``<answer>``/``</answer>``; eos ``<|im_end|>``, pad ``<|endoftext|>``.
  image processor (Qwen2VLImageProcessor): min 32*32 px, max 128*128 px per image -> at most 16 tokens.
  video processor (Qwen3VLVideoProcessor): fps 2, 4..16 frames, 4096..65536 px summed over all sampled
        frames (per-frame cap on, as qwen-vl-utils). A 3 s 128x96 clip at 4 fps -> 6 frames at 64x96 ->
        video_grid_thw [3, 4, 6] -> 3 groups of 6 tokens.

Messages format (what the template + processor accept; the agent and SFT code rely on it):
  ``{"role": "system"|"user"|"assistant"|"tool", "content": str | [part, ...]}`` where a part is
  ``{"type": "text", "text": s}``, ``{"type": "image", "image": path|PIL|array}`` (or ``"url"``/``"path"``),
  ``{"type": "video", "video": path}`` (or ``"url"``/``"path"``), or the OpenAI forms
  ``{"type": "image_url", "image_url": {"url": u}}`` / ``{"type": "video_url", "video_url": {"url": u}}``
  used in the ParaVT parquets. Assistant messages may carry OpenAI ``tool_calls``; ``tool`` messages are
  rendered as ``<tool_response>`` blocks in one user turn. ``tools=[schema, ...]`` renders the Hermes
  ``# Tools`` envelope in the system turn. Images render as ``<|vision_start|><|image_pad|><|vision_end|>``;
  a video renders as a bare ``<|video_pad|>`` which the processor expands to
  ``<t seconds><|vision_start|><|video_pad|>*n<|vision_end|>`` per 2-frame group (``load`` rewrites a real
  Qwen3-VL template the same way so markers never nest).
  ``processor.apply_chat_template(..., tokenize=True)`` only loads media from ``image``/``video`` parts
  (it converts ``image_url`` itself but not ``video_url``): pass messages through
  :func:`to_processor_messages` first. To feed frames you decoded yourself, call
  ``processor(text=[rendered], videos=[frames], video_metadata=[VideoMetadata(...)], do_sample_frames=False)``
  so the timestamps are right.
  The processor returns ``input_ids``, ``attention_mask``, ``mm_token_type_ids`` (0 text, 1 image, 2 video;
  the model refuses multimodal input without it), ``pixel_values``/``image_grid_thw`` and
  ``pixel_values_videos``/``video_grid_thw``; pass all of them to ``model(...)`` / ``model.generate(...)``.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paravt_core.modeling.chat_template import CHAT_TEMPLATE, unnest_video_markers
from paravt_core.modeling.tiny_tokenizer import EOS_TOKEN, PAD_TOKEN, write_tokenizer_files

# Default sizes of the tiny processor (see the module docstring).
TINY_IMAGE_SIZE = {"shortest_edge": 32 * 32, "longest_edge": 128 * 128}
TINY_VIDEO_SIZE = {"shortest_edge": 64 * 64, "longest_edge": 16 * 64 * 64}
TINY_VIDEO_FPS = 2.0
TINY_VIDEO_MIN_FRAMES = 4
TINY_VIDEO_MAX_FRAMES = 16
# Qwen3-VL (SigLIP2 tower) normalizes with mean = std = 0.5 for images and videos.
_HALF = [0.5, 0.5, 0.5]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DOWNLOAD_MARKER = ".paravt_download_complete"


@dataclass
class Loaded:
    """A loaded model with everything needed to feed it."""

    model: Any  # Qwen3VLForConditionalGeneration (or whatever AutoModelForImageTextToText resolves)
    processor: Any  # Qwen3VLProcessor
    tokenizer: Any  # processor.tokenizer
    config: Any  # model.config
    path: str  # local directory the weights were read from


# ---------------------------------------------------------------------------------------------------------
# tiny model


def _tiny_config(vocab_size: int, token_ids: dict[str, int]):
    from transformers import Qwen3VLConfig

    text = {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5_000_000.0,
            "mrope_section": [6, 5, 5],  # sums to head_dim / 2, interleaved T/H/W like Qwen3-VL
            "mrope_interleaved": True,
        },
        "pad_token_id": token_ids[PAD_TOKEN],
        "bos_token_id": token_ids[PAD_TOKEN],
        "eos_token_id": token_ids[EOS_TOKEN],
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 64,  # = text hidden size
        "num_position_embeddings": 256,  # a 16x16 learned grid, interpolated to the frame grid
        "deepstack_visual_indexes": [0],
    }
    return Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=token_ids["<|image_pad|>"],
        video_token_id=token_ids["<|video_pad|>"],
        vision_start_token_id=token_ids["<|vision_start|>"],
        vision_end_token_id=token_ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def _tiny_processor(tokenizer):
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    image_processor = Qwen2VLImageProcessor(
        size=dict(TINY_IMAGE_SIZE),
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=_HALF,
        image_std=_HALF,
    )
    video_processor = Qwen3VLVideoProcessor(
        size=dict(TINY_VIDEO_SIZE),
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        fps=TINY_VIDEO_FPS,
        min_frames=TINY_VIDEO_MIN_FRAMES,
        max_frames=TINY_VIDEO_MAX_FRAMES,
        cap_pixels_per_frame=True,
        image_mean=_HALF,
        image_std=_HALF,
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


@contextmanager
def hf_bars_off() -> Iterator[None]:
    """transformers' own tqdm bars ("Loading weights", "Writing model shards") off for the block: a stage
    loads up to three copies of a model (policy, reference, rollout engine) and each printed its bar."""
    from transformers.utils import logging as hf_logging

    were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if were_on:
            hf_logging.enable_progress_bar()


TINY_MARKER = ".paravt-tiny-model"  # written last into a tiny-model directory: "this is ours to rebuild"


def build_tiny_model(out_dir: str, seed: int = 0, force: bool = False) -> str:
    """Build the tiny Qwen3-VL (model, tokenizer, processor, chat template, generation config) into ``out_dir``.

    Deterministic for a given ``seed``: same files, same weights. Returns ``out_dir`` as a string. A non-empty
    ``out_dir`` that is not an earlier tiny model (a trained checkpoint, anything else) is refused with
    ``FileExistsError`` unless ``force``.
    """
    out = Path(out_dir)
    if out.is_file():
        raise NotADirectoryError(f"{out_dir} is a file; give a directory")
    if not force and out.is_dir() and any(out.iterdir()) and not (out / TINY_MARKER).is_file():
        raise FileExistsError(
            f"{out_dir} is not empty and is not an earlier `paravt tiny-model` output (it could be a trained "
            "checkpoint); choose an empty directory or pass --force to overwrite"
        )

    with hf_bars_off():  # a ~1 MB model needs no "Writing model shards" bar
        return _build_tiny_model(Path(out_dir), seed)


def _build_tiny_model(out: Path, seed: int) -> str:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3VLForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="paravt-tok-") as tmp:
        write_tokenizer_files(tmp)
        # Loading from disk gives exactly the tokenizer object a real checkpoint directory would give.
        tokenizer = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
    for key in ("is_local", "local_files_only"):  # loading artefacts, not tokenizer settings
        tokenizer.init_kwargs.pop(key, None)
    token_ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in tokenizer.get_added_vocab()}
    vocab_size = -(-len(tokenizer) // 64) * 64  # padded like Qwen's 151936 > 151669

    config = _tiny_config(vocab_size, token_ids)
    fork_devices: list = []  # keep the caller's RNG state untouched
    with torch.random.fork_rng(devices=fork_devices):
        torch.manual_seed(seed)
        model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        # Qwen3-VL-Instruct's sampling defaults; tests ask for greedy explicitly.
        bos_token_id=token_ids[PAD_TOKEN],
        pad_token_id=token_ids[PAD_TOKEN],
        eos_token_id=[token_ids[EOS_TOKEN], token_ids[PAD_TOKEN]],
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
        repetition_penalty=1.0,
    )
    (out / TINY_MARKER).unlink(missing_ok=True)  # absent while rewriting: an interrupted build is not "ours"
    model.save_pretrained(out)
    _tiny_processor(tokenizer).save_pretrained(out)
    # safetensors writes the weights through a temporary file (mode 0600): make every file readable by
    # others like the rest, so containers running as another uid read it (make images-dag-smoke).
    for f in out.iterdir():
        f.chmod(f.stat().st_mode | 0o444)
    (out / TINY_MARKER).write_text(json.dumps({"seed": seed}) + "\n")
    return str(out)


# ---------------------------------------------------------------------------------------------------------
# loading


def default_cache_dir() -> Path:
    """Where s3 checkpoints are cached: ``$PARAVT_MODEL_CACHE`` or ``~/.cache/paravt/models``."""
    env = os.environ.get("PARAVT_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "paravt" / "models"


def _offline() -> bool:
    return any(
        os.environ.get(v, "").lower() in {"1", "true", "yes", "on"}
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _s3_fingerprint(uri: str) -> str:
    """JSON of (key, size, ETag) for every object under ``uri``: changes whenever the checkpoint does."""
    from paravt_core import storage  # imported lazily: only the s3 branch needs boto3

    bucket, key = storage.split_s3(uri)
    prefix = key.strip("/") + "/" if key.strip("/") else ""
    pages = storage.s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    objects = sorted(
        (o["Key"], o["Size"], o.get("ETag", "")) for page in pages for o in page.get("Contents", [])
    )
    if not objects:
        raise FileNotFoundError(f"model {uri!r}: no objects under this prefix")
    return json.dumps(objects)


def _from_s3(uri: str, cache_dir: Path) -> Path:
    """Download an s3 checkpoint once into ``cache_dir``; reuse it while the remote listing is unchanged."""
    from paravt_core import storage

    uri = uri.rstrip("/")
    local = cache_dir / "s3" / uri.removeprefix("s3://")
    local.parent.mkdir(parents=True, exist_ok=True)
    # One process at a time per cache entry: another may be about to load from the directory we'd replace.
    with open(local.parent / f".{local.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fingerprint = _s3_fingerprint(uri)
        marker = local / _DOWNLOAD_MARKER
        if marker.is_file() and marker.read_text() == fingerprint:
            return local
        # Download into a sibling temp dir and rename: an interrupted download is never taken as complete.
        tmp = Path(tempfile.mkdtemp(prefix=f".{local.name}.part-", dir=local.parent))
        try:
            storage.download_dir(uri, str(tmp))
            (tmp / _DOWNLOAD_MARKER).write_text(fingerprint)
            if local.exists():
                shutil.rmtree(local)
            tmp.rename(local)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return local


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    offline = _offline()
    try:
        return Path(snapshot_download(repo_id=repo_id, local_files_only=offline))
    except Exception as err:  # hub errors are many types; the caller needs the id and the mode
        mode = "in the local hub cache (HF_HUB_OFFLINE is set)" if offline else "on the hub"
        raise FileNotFoundError(
            f"model {repo_id!r}: not a local directory and not found {mode}: {err}"
        ) from err


def resolve_model_dir(uri: str, cache_dir: str | Path | None = None) -> Path:
    """Map a model URI to a local directory holding ``config.json``.

    Local path (or ``file://``) -> itself; ``s3://bucket/prefix`` -> downloaded into ``cache_dir`` and reused
    while the remote objects (keys, sizes, ETags) are unchanged;
    ``owner/name`` hub id that is not a local path -> ``huggingface_hub.snapshot_download`` (cache only when
    ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` is set).
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if uri.startswith("s3://"):
        path = _from_s3(uri, cache)
    elif uri.startswith("file://"):
        path = Path(uri.removeprefix("file://"))
    elif Path(uri).exists() or not _HUB_ID.match(uri):
        path = Path(uri)
    else:
        path = _from_hub(uri)
    if not path.is_dir():
        raise FileNotFoundError(f"model {uri!r}: {path} is not a directory")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model {uri!r}: no config.json in {path} (not a saved checkpoint directory)")
    return path.resolve()


def _fix_templates(processor) -> None:
    """Apply :func:`unnest_video_markers` to every chat template the processor and tokenizer carry."""
    for owner in (processor, getattr(processor, "tokenizer", None)):
        template = getattr(owner, "chat_template", None)
        if isinstance(template, str):
            owner.chat_template = unnest_video_markers(template)
        elif isinstance(template, dict):
            owner.chat_template = {k: unnest_video_markers(v) for k, v in template.items()}


def load(
    uri: str,
    device: str = "cpu",
    dtype: Any = None,
    cache_dir: str | Path | None = None,
    purpose: str | None = None,
) -> Loaded:
    """Load model + processor from a local dir, an ``s3://`` prefix or a hub id (see :func:`resolve_model_dir`).

    ``dtype``: ``None`` keeps the checkpoint's dtype; otherwise a ``torch.dtype`` or its name ("bfloat16").
    The model is returned in eval mode on ``device``. ``purpose`` ("policy", "reference", ...): one line on
    stderr once loaded, in place of transformers' bar (which is off either way).
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    start = time.perf_counter()
    path = resolve_model_dir(uri, cache_dir)
    if isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    _fix_templates(processor)
    with hf_bars_off():
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=dtype or "auto", local_files_only=True
        )
    model.to(device)
    model.eval()
    if purpose:
        count = sum(p.numel() for p in model.parameters())
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
        print(
            f"{purpose}: loaded {path} ({_count_text(count)} parameters, {'/'.join(dtypes)}, {device}) "
            f"in {time.perf_counter() - start:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return Loaded(
        model=model, processor=processor, tokenizer=processor.tokenizer, config=model.config, path=str(path)
    )


def _count_text(n: int) -> str:
    """321K, 8.8B: a parameter count as people say it."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def load_processor_only(uri: str, cache_dir: str | Path | None = None) -> Loaded:
    """Processor and config of a checkpoint, without its weights (``model`` is ``None``): what a training rank
    needs when rank 0 reads the weights and broadcasts them (``paravt_core.train.fsdp.build``)."""
    from transformers import AutoConfig, AutoProcessor

    path = resolve_model_dir(uri, cache_dir)
    processor = AutoProcessor.from_pretrained(path, local_files_only=True)
    _fix_templates(processor)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    return Loaded(
        model=None, processor=processor, tokenizer=processor.tokenizer, config=config, path=str(path)
    )


# ---------------------------------------------------------------------------------------------------------
# messages


def to_processor_messages(messages: list[dict]) -> list[dict]:
    """Copy of ``messages`` with OpenAI ``image_url``/``video_url`` parts turned into ``image``/``video`` parts.

    ``processor.apply_chat_template(tokenize=True)`` loads media only from ``image``/``video`` parts; the
    rendered text is the same either way. Text content and other parts are kept as they are.
    """
    out = copy.deepcopy(messages)
    for message in out:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for i, part in enumerate(content):
            kind = part.get("type")
            if kind in ("image_url", "video_url"):
                ref = part.get(kind)
                url = ref.get("url") if isinstance(ref, dict) else ref
                if not url:
                    raise ValueError(f"{kind} part without a url: {part!r}")
                media = kind.removesuffix("_url")
                content[i] = {"type": media, media: url}
    return out
