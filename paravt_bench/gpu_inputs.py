"""The inputs of the GPU checks and profiles, built once under a work folder and carried to a lent GPU: a model
(the tiny one, or Qwen3-VL-2B's shapes with random weights) and the synthetic set through the data stage
(``scripts/gpu_profile.py``, ``scripts/gpu_check.py``, ``benchmarks/step_host.py``, ``benchmarks/flops_of_run.py``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def prepare(work: Path, tiny: bool) -> tuple[str, str]:
    """(model dir, data dir): built under ``work`` when absent."""
    model_dir = work / ("tiny-model" if tiny else "qwen3vl-2b-random")
    data_dir = work / "data"
    if not (model_dir / "config.json").is_file():
        if tiny:
            from paravt_core.models import build_tiny_model

            build_tiny_model(str(model_dir))
        else:
            from paravt_bench.qwen3vl_2b import build

            build(str(model_dir), None)
    if not data_dir.is_dir():
        # imported here only: synth needs ffmpeg-python (and its `future`), which a lent GPU's carry lacks
        from paravt_core.config import DataConfig, load_config
        from paravt_core.data.stage import run as data_run
        from paravt_core.synth import synthesize

        synth = synthesize(str(work / "synth"), videos=8, seconds=20, seed=0)
        overrides = [
            f"download.media_source={synth.source_dir}",
            f"download.parquet_source={synth.parquet_dir}",
            f"work_dir={work / 'data-work'}",
            f"output={data_dir}",
        ]
        data_run(load_config(DataConfig, None, overrides))
    elif relocate(data_dir, work):
        print(f"{data_dir}: media paths pointed at {work / 'data-work'} (data built on another machine)")
    return str(model_dir), str(data_dir)


def _replace(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    return value


def relocate(data_dir: Path, work: Path) -> int:
    """Data built on another machine (carried): its rows name media under that machine's ``<work>/data-work``;
    point them at this ``work``'s copy (SFT and RL rows, every column that names a file there). Returns the
    number of parquet files rewritten."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    here = str(work.resolve() / "data-work") + "/"
    found = re.compile(r"(/[^'\"\s]*?/data-work/)")
    changed = 0
    for path in sorted([*data_dir.glob("sft/*.parquet"), *data_dir.glob("rl/*.parquet")]):
        table = original = pq.read_table(path)
        for i, name in enumerate(table.column_names):
            column = table.column(name)
            values = column.to_pylist()  # a few dozen rows
            old = next((m.group(1) for v in values if (m := found.search(str(v)))), None)
            if old is not None and old != here:
                table = table.set_column(i, name, pa.array(_replace(values, old, here), type=column.type))
        if table is not original:
            pq.write_table(table, path)
            changed += 1
    return changed
