"""One pixel budget: the SGLang server our launcher starts (``--mm-process-config``), the
episode encoder and the followers' ``restore`` of rank 0's samples all use ``AgentConfig.processor_pixels``.
Otherwise, when a preset sets the overview or crop budget apart from ``max_pixels``, the server makes other
image tokens than our prompt holds, and the followers rebuild other pixels than rank 0 trained on."""

from __future__ import annotations

import json

import pytest

from paravt_core.agent.episode import make_encoder
from paravt_core.config import load_config
from paravt_core.rl.config import RlConfig
from paravt_core.rl.launch import plan
from tests.support.paths import ROOT

PRESETS = sorted((ROOT / "configs" / "rl").glob("*.yaml"))
# the release's eval budgets (eval/protocols.py): overview frames far larger than crops
APART = [
    "agent.overview_max_pixels=602112",
    "agent.overview_min_pixels=100352",
    "agent.crop_max_pixels=50176",
]


def _mm_config(command: list[str]) -> dict:
    return json.loads(command[command.index("--mm-process-config") + 1])["image"]


@pytest.mark.parametrize("apart", [False, True], ids=["preset", "budgets-apart"])
@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_server_encoder_and_followers_use_one_budget(preset, apart, tiny_model):
    overrides = ["engine.kind=sglang", "engine.base_url=", *(APART if apart else [])]
    one = load_config(RlConfig, preset, [*overrides, "engine.gpus=[7]"])
    fleet = load_config(
        RlConfig, preset, [*overrides, "engine.gpus=[6,7]", "engine.servers=2", "engine.weight_sync=disk"]
    )
    encoder = make_encoder(None, one.agent, tiny_model.processor).images_kwargs
    lo, hi = one.agent.processor_pixels
    assert encoder == {"size": {"shortest_edge": lo, "longest_edge": hi}}
    servers = [plan(one, "/c.yaml", gpus=8, model_dir="/m", python="python").server_command]
    servers += [cmd for cmd, _, _ in plan(fleet, "/c.yaml", gpus=8, model_dir="/m", python="python").fleet]
    assert len(servers) == 3
    for command in servers:
        assert _mm_config(command) == encoder
    from paravt_core.rl.stage import restore_images_kwargs

    assert restore_images_kwargs(one) == encoder
