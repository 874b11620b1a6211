"""Images and videos reach the model in training, under the pinned transformers and under 5.17 (the lent GPU's).

transformers 5.17's ``Qwen3VLModel.forward`` has no ``mm_encoder_outputs`` argument (its signature in
``transformers/models/qwen3_vl/modeling_qwen3_vl.py`` 5.17.0 ends with ``mm_token_type_ids, **kwargs``), so
pre-encoded media handed to it are dropped. ``scripts/pixels_probe.py`` computes the training loss of one
image+video sample with real and with shuffled pixels; it runs here once per version (5.17 from the side
site that ``scripts/setup.sh`` installs into ``.venv-bench/tf517-site``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from paravt_core.train import media
from tests.support.paths import ROOT

REPO = ROOT
TF517_SITE = REPO / ".venv-bench" / "tf517-site"


def _probe(tmp_path: Path, site: Path | None) -> dict:
    if site is not None and not (site / "transformers-5.17.0.dist-info").is_dir():
        pytest.fail(f"{site} is missing: run scripts/setup.sh (step tf517_site)")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = os.pathsep.join([str(site)] if site else [])
    argv = [
        sys.executable,
        str(REPO / "scripts/pixels_probe.py"),
        "--work",
        str(tmp_path),
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp_path / "pixels-probe.json").read_text())


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return {
        "pinned": _probe(tmp_path_factory.mktemp("pinned"), None),
        "5.17": _probe(tmp_path_factory.mktemp("tf517"), TF517_SITE),
    }


def test_the_training_loss_changes_with_the_pixels_under_both_versions(probes: dict[str, dict]) -> None:
    pinned, old = probes["pinned"], probes["5.17"]
    assert pinned["versions"]["transformers"] == "5.19.0" and old["versions"]["transformers"] == "5.17.0"
    for probe in (pinned, old):
        assert probe["media_tokens"] == {"image": 8, "video": 8}  # 2 images of 2x2 tokens, 2 groups of 2x2
        assert probe["pixels_matter"] is True
        assert abs(probe["loss"]["real"] - probe["loss"]["shuffled"]) > 1e-4
    # one model, one sample, one path: the same losses under both versions
    for key in ("real", "shuffled"):
        assert old["loss"][key] == pytest.approx(pinned["loss"][key], abs=1e-6)


def test_the_training_loss_is_what_transformers_itself_computes_where_it_takes_encoded_media(
    probes: dict[str, dict],
) -> None:
    # 5.19's own merge (Qwen3VLModel.forward with mm_encoder_outputs) on the same sample: images, a video,
    # an image, interleaved, so the image and video rows and their deepstack features land where transformers
    # puts them
    pinned = probes["pinned"]["loss"]
    assert pinned["native_mm_encoder_outputs"] is True
    assert pinned["real"] == pytest.approx(pinned["native_real"], abs=1e-6)
    assert pinned["shuffled"] == pytest.approx(pinned["native_shuffled"], abs=1e-6)


def test_transformers_5_17_drops_encoded_media_handed_to_its_forward(probes: dict[str, dict]) -> None:
    # what the old training path did under 5.17 (the finding): the loss does not move with the pixels
    old = probes["5.17"]
    assert old["loss"]["native_mm_encoder_outputs"] is False
    assert old["native_pixels_matter"] is False and old["native_gap"] == 0.0


class _Text(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(4, 2)

    def forward(self, inputs_embeds=None, position_ids=None, **kwargs):  # media would land in kwargs
        return (inputs_embeds,)


def test_training_refuses_a_language_model_that_would_drop_the_media(tiny_model_dir: str) -> None:
    from types import SimpleNamespace

    from paravt_core.models import load
    from paravt_core.rl.learner import PolicyLogprobs
    from paravt_core.sft.packing import PackedLoss

    dropping = SimpleNamespace(model=SimpleNamespace(language_model=_Text()))
    for wrapper in (PackedLoss, PolicyLogprobs):
        with pytest.raises(RuntimeError, match=r"_Text\.forward has no visual_pos_masks, deepstack_visual_embeds "
                           r"argument, so images and videos would be dropped; refusing to train"):  # fmt: skip
            wrapper(dropping)
    model = load(tiny_model_dir).model  # the installed transformers' Qwen3-VL is accepted
    assert PackedLoss(model).inner is model and PolicyLogprobs(model).inner is model


# merge_media by hand (a stand-in embedding table; the tower's output as float32, as a bf16 / float32 tower
# hands it to a model whose embeddings are in another dtype).


def _model(rows):
    table = torch.nn.Embedding.from_pretrained(torch.tensor(rows, dtype=torch.float64))
    return SimpleNamespace(model=SimpleNamespace(language_model=SimpleNamespace(embed_tokens=table)))


def _part(tokens, *layers):
    """An encode_media output: one item's merged tokens and its deepstack features, float32."""
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return SimpleNamespace(pooler_output=[f32(tokens)], deepstack_features=[[f32(x)] for x in layers])


def test_merge_media_scatters_in_the_embeddings_dtype_and_orders_deepstack_rows_by_position():
    model = _model([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5], [3.0, 3.5]])
    ids = torch.tensor([[0, 1, 2, 3]])
    # position 1 a video token, position 2 an image token (mm_token_type_ids 2 and 1)
    types = torch.tensor([[0, 2, 1, 0]])
    encoded = {"image": _part([[10, 11]], [[1, 2]], [[3, 4]]), "video": _part([[20, 21]], [[5, 6]], [[7, 8]])}
    out = media.merge_media(model, ids, types, encoded)
    assert out["inputs_embeds"].dtype == torch.float64
    assert out["inputs_embeds"].tolist() == [[[0.0, 0.5], [20.0, 21.0], [10.0, 11.0], [3.0, 3.5]]]
    assert out["visual_pos_masks"].tolist() == [[False, True, True, False]]
    # per layer, the visual positions in sequence order: the video row (position 1), then the image row
    assert [t.tolist() for t in out["deepstack_visual_embeds"]] == [[[5, 6], [1, 2]], [[7, 8], [3, 4]]]
    # one kind only: its own mask and layers, the embeddings' dtype again
    only = media.merge_media(model, ids, torch.tensor([[0, 0, 1, 0]]), {"image": encoded["image"]})
    assert only["inputs_embeds"].dtype == torch.float64
    assert only["inputs_embeds"][0, 2].tolist() == [10.0, 11.0]
    assert only["visual_pos_masks"].tolist() == [[False, False, True, False]]
    assert [t.tolist() for t in only["deepstack_visual_embeds"]] == [[[1, 2]], [[3, 4]]]
    assert list(media.merge_media(model, ids, torch.zeros(1, 4, dtype=torch.long), {})) == ["inputs_embeds"]


def test_merge_media_refuses_images_and_videos_with_different_deepstack_depths():
    # one tower makes both, so the depths agree; were they to differ, no layer may be dropped silently
    model = _model([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]])
    encoded = {"image": _part([[10, 11]], [[1, 2]], [[3, 4]]), "video": _part([[20, 21]], [[5, 6]])}
    with pytest.raises(ValueError, match="zip"):
        media.merge_media(model, torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 2]]), encoded)
