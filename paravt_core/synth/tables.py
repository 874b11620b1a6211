"""The synthetic parquets in the release's schemas: SFT conversations, RL prompts, the eval split."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from paravt_core.data.schema import SFT_SPLITS, count_tag
from paravt_core.synth import rows
from paravt_core.synth.archives import Slot

EVAL_FILE = "synthetic_eval.parquet"


def write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


SFT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("messages", pa.string()),
        ("video_duration", pa.float64()),
    ]
)
RL_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("videos", pa.list_(pa.struct([("video", pa.string())]))),
        (
            "extra_info",
            pa.struct(
                [
                    ("answer", pa.string()),
                    ("question_type", pa.string()),
                    ("index", pa.int64()),
                    ("split", pa.string()),
                ]
            ),
        ),
    ]
)
EVAL_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("video", pa.string()),
        ("question", pa.string()),
        ("options", pa.list_(pa.string())),
        ("answer", pa.string()),
        ("question_type", pa.string()),
        ("duration", pa.float64()),
        ("data_source", pa.string()),
    ]
)


def _sft_candidates(split: str, plan: list[dict], vids: list[rows.Video]) -> list[rows.Video]:
    own = [v for p, v in zip(plan, vids, strict=True) if p["slot"].split == split]
    return own or vids


def write_sft(
    pq_dir: Path, plan: list[dict], vids: list[rows.Video], images: list[dict], seed: int
) -> list[Path]:
    paths = []
    for split in SFT_SPLITS:
        cands = _sft_candidates(split, plan, vids)
        families = rows.SFT_FAMILIES[split]
        system = rows.TOOL_ENVELOPE if split == "charades" else rows.AGENT_SYSTEM_PROMPT
        records: list[dict] = []
        n_rows = max(6, 2 * len(cands))
        for j in range(n_rows):
            v = cands[j % len(cands)]
            rng = random.Random(f"{seed}/sft/{split}/{j}")
            q = families[j % len(families)](v, rng)
            msgs = rows.sft_messages(v, q, system, style=j % 4)
            records.append(_sft_record(f"{split}-{j:05d}", split, msgs, v.duration))
        if split == "videor1":
            records += _videor1_image_rows(images, vids, system, len(records))
        table = pa.Table.from_pylist(records, schema=SFT_SCHEMA)
        path = pq_dir / f"paravt_sft_{split}_{count_tag(len(records))}.parquet"
        write_parquet(path, table)
        paths.append(path)
    return paths


def _sft_record(row_id: str, split: str, msgs: list[dict], duration: float | None) -> dict:
    return {"id": row_id, "source": split, "messages": json.dumps(msgs), "video_duration": duration}


def _videor1_image_rows(images: list[dict], vids: list[rows.Video], system: str, start: int) -> list[dict]:
    """Image-only rows (no tools) and one interleaved image + video grounding row per videor1 round."""
    by_path = {v.path: v for v in vids}
    out = []
    for im in images:
        msgs = rows.image_messages(im["path"], im["colour"], im["shape"])
        out.append(_sft_record(f"videor1-{start + len(out):05d}", "videor1", msgs, None))
        if im["path"].endswith("img_000.png"):
            v = by_path[im["video"]]
            k = next(i for i, e in enumerate(v.events) if (e.shape, e.colour) == (im["shape"], im["colour"]))
            q = rows.image_video_question(v, k)
            msgs = rows.sft_messages(v, q, system, style=2, image=im["path"])
            out.append(_sft_record(f"videor1-{start + len(out):05d}", "videor1", msgs, v.duration))
    return out


def _rl_data_source(slot: Slot, i: int, qtype: str) -> str:
    """Names in the spirit of the release's RL mix (Charades grounding, HACS / Ego4D-NaQ QA, ...)."""
    if slot.name == "charades" and qtype == "tvg":
        return "charades_tvg"
    if slot.name == "selfqa" and qtype == "oe":
        return ("hacs", "ego4d_naq")[i % 2]
    return f"synthetic_{slot.name}_{qtype}"


def write_rl(pq_dir: Path, plan: list[dict], vids: list[rows.Video], seed: int) -> Path:
    records = []
    for p, v in zip(plan, vids, strict=True):
        for family in (rows.q_which_at, rows.q_when, rows.q_colour_after):
            rng = random.Random(f"{seed}/rl/{p['i']}/{family.__name__}")
            q = family(v, rng)
            idx = len(records)
            records.append(
                {
                    "id": f"rl-{idx:05d}",
                    "data_source": _rl_data_source(p["slot"], p["i"], q.qtype),
                    "prompt": [{"role": "user", "content": f"<video>\n{q.text}"}],
                    "videos": [{"video": v.path}],
                    "extra_info": {
                        "answer": q.gold,
                        "question_type": q.qtype,
                        "index": idx,
                        "split": "train",
                    },
                }
            )
    path = pq_dir / f"paravt_rl_diverse_{count_tag(len(records))}.parquet"
    write_parquet(path, pa.Table.from_pylist(records, schema=RL_SCHEMA))
    return path


def write_eval(eval_dir: Path, vids: list[rows.Video], seed: int) -> Path:
    records = []
    for i, v in enumerate(vids):
        for family in (rows.q_which_at, rows.q_when):
            q = family(v, random.Random(f"{seed}/eval/{i}/{family.__name__}"))
            records.append(
                {
                    "id": f"eval-{len(records):05d}",
                    "video": v.path,
                    "question": q.text,
                    "options": q.options,
                    "answer": q.gold,
                    "question_type": q.qtype,
                    "duration": v.duration,
                    "data_source": "synthetic",
                }
            )
    path = eval_dir / EVAL_FILE
    write_parquet(path, pa.Table.from_pylist(records, schema=EVAL_SCHEMA))
    return path
