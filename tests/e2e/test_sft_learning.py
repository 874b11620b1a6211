"""SFT learns: the tiny model's loss falls and it starts to answer in the ParaVT protocol."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq

from paravt_core.agent import prompts
from paravt_core.agent.parsing import extract_answer, parse_tool_calls
from paravt_core.config import SftConfig, load_config
from paravt_core.models import Loaded, load
from paravt_core.sft.inputs import MediaSpec, load_video
from paravt_core.sft.stage import run
from tests.support.paths import ROOT

REPO = ROOT
TINY = REPO / "configs" / "sft" / "tiny.yaml"
_THINK = re.compile(r"\s*<think>.+?</think>", re.DOTALL)


def follows_protocol(completion: str) -> bool:
    """A closed ``<think>`` block first, then at least one ``<tool_call>`` block or an ``<answer>``."""
    think = _THINK.match(completion)
    if think is None:
        return False
    rest = completion[think.end() :]
    return bool(parse_tool_calls(rest)) or extract_answer(rest) is not None


def protocol_rate(loaded: Loaded, items: list[dict], media_root: Path, spec: MediaSpec) -> float:
    """Share of greedy completions (128 new tokens) on the agent's prompt that follow the protocol."""
    processor = loaded.processor
    texts, videos, metadata = [], [], []
    for item in items:
        path = str(media_root / item["video"])
        question = prompts.load_prompt_set().question_with_suffix(item["question"], path.rsplit("/", 1)[-1])
        messages = [
            {
                "role": "system",
                "content": [{"type": "text", "text": prompts.system_prompt("agentic_general")}],
            },
            {
                "role": "user",
                "content": [{"type": "video", "video": path}, {"type": "text", "text": question}],
            },
        ]
        texts.append(processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        frames, meta = load_video(path, spec)
        videos.append(frames)
        metadata.append(meta)
    inputs = processor(
        text=texts,
        videos=videos,
        video_metadata=metadata,
        do_sample_frames=False,
        do_resize=False,
        padding=True,
        padding_side="left",
        return_tensors="pt",
    )
    out = loaded.model.generate(**inputs, max_new_tokens=128, do_sample=False)
    completions = processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=False)
    return sum(follows_protocol(c) for c in completions) / len(completions)


def test_follows_protocol_by_hand() -> None:
    assert follows_protocol('<think>a</think>\n<tool_call>\n{"name": "crop_video"}\n</tool_call>')
    assert follows_protocol("<think>a</think>\n<answer>B</answer>")
    assert not follows_protocol("<answer>B</answer>")  # no think block
    assert not follows_protocol("<think>a</think> B")  # neither call nor answer
    assert not follows_protocol("<think>a <answer>B</answer>")  # think never closed


def test_sft_lowers_loss_and_teaches_the_protocol(
    tiny_model_dir: str, sft_data_output: str, synth_dataset, synth_media_root: Path, tmp_path: Path
) -> None:
    out = tmp_path / "learn"
    overrides = [
        f"model.uri={tiny_model_dir}",
        f"data.input={sft_data_output}",
        f"output={out}",
        f"work_dir={tmp_path / 'work'}",
        "trainer.steps=100",
        "trainer.lr=1e-2",
        "trainer.warmup_ratio=0.05",
        "checkpoint.every=100",
        "data.num_workers=0",
    ]
    cfg = load_config(SftConfig, TINY, overrides)
    result = run(cfg)
    first, last = result.metrics["loss_first"], result.metrics["loss_last"]
    print(f"loss (mean of the first / last 5 steps): {first:.3f} -> {last:.3f}")
    assert last < 0.5 * first

    # Held out: the synthetic eval split (its prompts are not SFT rows), asked the way the
    # agent asks them.
    items = pq.read_table(synth_dataset.eval_parquet).to_pylist()
    spec = MediaSpec(**cfg.media.model_dump())
    before = protocol_rate(load(tiny_model_dir), items, synth_media_root, spec)
    after = protocol_rate(load(str(out / "final")), items, synth_media_root, spec)
    print(f"protocol parse rate on {len(items)} held-out prompts: before {before:.3f}, after {after:.3f}")
    assert after > before
