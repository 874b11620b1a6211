"""Shared pieces of the RL tests: the data stage's output for the synthetic dataset and a tiny RL config."""

from __future__ import annotations

from pathlib import Path

import pytest

from paravt_core.config import DataConfig, load_config
from paravt_core.rl.config import RlConfig

TINY_RL = Path(__file__).resolve().parents[1] / "configs" / "rl" / "tiny.yaml"


@pytest.fixture(scope="module")
def rl_data(synth_dataset, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``paravt data`` run on the session's synthetic dataset: ``<uri>/rl/*.parquet`` with local videos."""
    from paravt_core.data.stage import run

    tmp = tmp_path_factory.mktemp("rl_data")
    cfg = load_config(
        DataConfig,
        None,
        [
            f"download.media_source={synth_dataset.source_dir}",
            f"download.parquet_source={synth_dataset.parquet_dir}",
            f"work_dir={tmp / 'work'}",
            f"output={tmp / 'data'}",
        ],
    )
    run(cfg)
    return str(tmp / "data")


def tiny_rl_config(data: str, model: str, output: str, *overrides: str) -> RlConfig:
    return load_config(RlConfig, TINY_RL, [f"data={data}", f"model={model}", f"output={output}", *overrides])
