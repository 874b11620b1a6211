"""paravt_core.checkpoint in this process: the layout, the step listing, pruning, the
save / load round trip with its scheduler and RNG, the S3 staging, the rank that uploads each staged file.

Values are written out by hand from the module's documented layout (its docstring)."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from paravt_core import checkpoint, storage

# A one-rank checkpoint's files: DCP's metadata and one shard, this rank's RNG states, the scheduler, the
# trainer state and the completion marker
ONE_RANK_CHECKPOINT = [
    "_COMPLETE",
    "model_optim/.metadata",
    "model_optim/__0_0.distcp",
    "rng/rank_00000.pt",
    "scheduler.pt",
    "trainer.json",
]


def _layer(weight: float) -> tuple[torch.nn.Linear, torch.optim.AdamW, torch.optim.lr_scheduler.StepLR]:
    """A 3 -> 2 linear layer after one AdamW step (the optimizer holds state), weights ``weight``, bias
    ``-weight``, and a StepLR (step 1, gamma 0.5) stepped twice: lr 0.1 -> 0.025, last_epoch 2."""
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    scheduler.step()
    scheduler.step()
    with torch.no_grad():
        layer.weight.fill_(weight)
        layer.bias.fill_(-weight)
    return layer, optimizer, scheduler


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _steps(output: str) -> list[tuple[int, bool]]:
    return [(s, ok) for s, _, ok in checkpoint.list_checkpoints(output)]


def test_step_folders_are_eight_digit_steps_under_checkpoints(tmp_path: Path) -> None:
    assert checkpoint.step_dir(str(tmp_path), 12) == f"{tmp_path}/checkpoints/step_00000012"
    assert checkpoint.step_dir("s3://bkt/run", 3) == "s3://bkt/run/checkpoints/step_00000003"


def test_the_owner_of_a_staged_file_is_its_rank_or_rank_0() -> None:
    # DCP's shard files are __<rank>_<n>.distcp; RNG files rng/rank_<rank>.pt; everything else rank 0's
    assert checkpoint._owner("__1_0.distcp") == 1
    assert checkpoint._owner("__12_3.distcp") == 12
    assert checkpoint._owner("rank_00003.pt") == 3
    assert checkpoint._owner("__0_0.distcp") == 0
    others = (".metadata", "trainer.json", "scheduler.pt", "_COMPLETE")
    assert [checkpoint._owner(n) for n in others] == [0, 0, 0, 0]


def test_only_step_folders_are_listed_in_step_order_and_the_newest_complete_is_latest(tmp_path: Path) -> None:
    out = str(tmp_path / "run")
    assert checkpoint.list_checkpoints(out) == [] and checkpoint.latest_complete(out) is None
    for name in ("step_00000010", "step_00000002", "step_5", "step_000000030", "notes", "step_00000004x"):
        Path(out, "checkpoints", name).mkdir(parents=True)
        Path(out, "checkpoints", name, "f").write_text("x")
    storage.mark_complete(checkpoint.step_dir(out, 10))
    assert checkpoint.list_checkpoints(out) == [
        (2, f"{out}/checkpoints/step_00000002", False),
        (10, f"{out}/checkpoints/step_00000010", True),
    ]
    assert checkpoint.latest_complete(out) == f"{out}/checkpoints/step_00000010"
    storage.mark_complete(checkpoint.step_dir(out, 2))
    storage.clear_complete(checkpoint.step_dir(out, 10))
    assert checkpoint.latest_complete(out) == f"{out}/checkpoints/step_00000002"


def test_step_folders_on_s3_are_found_by_their_first_level_name(s3_bucket: str) -> None:
    out = f"{s3_bucket}/run"
    for key in (
        "checkpoints/step_00000007/model_optim/.metadata",
        "checkpoints/step_00000003/trainer.json",
        "checkpoints/notes/step_00000004/trainer.json",  # a step name one level down is not a checkpoint
        "checkpoints/step_00000005x/trainer.json",
    ):
        storage.write_bytes(f"{out}/{key}", b"{}")
    storage.mark_complete(f"{out}/checkpoints/step_00000003")
    assert checkpoint.list_checkpoints(out) == [
        (3, f"{out}/checkpoints/step_00000003", True),
        (7, f"{out}/checkpoints/step_00000007", False),
    ]
    assert checkpoint.latest_complete(out) == f"{out}/checkpoints/step_00000003"


def _make_steps(out: str, complete: tuple[int, ...], incomplete: tuple[int, ...]) -> None:
    for s in complete + incomplete:
        storage.write_bytes(storage.join(checkpoint.step_dir(out, s), "trainer.json"), b"{}")
    for s in complete:
        storage.mark_complete(checkpoint.step_dir(out, s))


@pytest.mark.parametrize(
    ("keep_last", "left"),
    [
        # complete 1 2 4 5, incomplete 3 and 6: 3 is older than the newest complete (a dead leftover), 6 newer
        (2, [(4, True), (5, True), (6, False)]),
        (3, [(2, True), (4, True), (5, True), (6, False)]),
        (1, [(5, True), (6, False)]),
    ],
)
def test_prune_keeps_the_newest_complete_and_a_newer_incomplete_one(
    tmp_path: Path, keep_last: int, left: list[tuple[int, bool]]
) -> None:
    out = str(tmp_path)
    _make_steps(out, (1, 2, 4, 5), (3, 6))
    _check_prune(tmp_path, keep_last, left)


def test_prune_without_a_complete_checkpoint_keeps_every_one(tmp_path: Path) -> None:
    # a first run killed while writing its first checkpoints: nothing is older than a complete one
    _make_steps(str(tmp_path), (), (1, 2))
    _check_prune(tmp_path, 1, [(1, False), (2, False)])


def _check_prune(tmp_path: Path, keep_last: int, left: list[tuple[int, bool]]) -> None:
    out = str(tmp_path)
    checkpoint.prune(out, keep_last)
    assert _steps(out) == left
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [f"step_{s:08d}" for s, _ in left]


def test_prune_on_s3_deletes_every_object_of_a_dropped_checkpoint(s3_bucket: str) -> None:
    out = f"{s3_bucket}/run"
    _make_steps(out, (1, 2), (3,))
    checkpoint.prune(out, 1)
    assert _steps(out) == [(2, True), (3, False)]
    assert storage.list_uris(checkpoint.step_dir(out, 1)) == []


def _draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_save_then_load_restores_weights_optimizer_scheduler_rng_and_state(tmp_path: Path) -> None:
    out = str(tmp_path / "run")
    layer, optimizer, scheduler = _layer(0.5)
    saved_avg = optimizer.state[layer.weight]["exp_avg"].clone()
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        uri = checkpoint.save(
            out, 3, layer, optimizer, {"step": 3, "seen": [1, 2]}, staging_root=str(tmp_path / "stage"),
            keep_last=2, scheduler=scheduler,
        )  # fmt: skip
    assert uri == f"{out}/checkpoints/step_00000003"
    assert _files(Path(uri)) == ONE_RANK_CHECKPOINT
    assert storage.completion_info(uri)["info"] == {"step": 3}
    expected = _draws()  # what the run draws next, from the RNG states the checkpoint holds
    _draws()

    fresh, fresh_opt, _ = _layer(0.0)
    fresh_sched = torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=1, gamma=0.5)
    with warnings.catch_warnings(record=True) as seen_load:
        warnings.simplefilter("always")
        state = checkpoint.load(
            uri, fresh, fresh_opt, staging_root=str(tmp_path / "x"), scheduler=fresh_sched
        )
    assert state == {"step": 3, "seen": [1, 2]}
    assert _draws() == expected
    assert torch.equal(fresh.weight, torch.full((2, 3), 0.5)) and torch.equal(
        fresh.bias, torch.full((2,), -0.5)
    )
    assert torch.equal(fresh_opt.state[fresh.weight]["exp_avg"], saved_avg)
    assert fresh_sched.last_epoch == 2 and fresh_sched.get_last_lr() == [pytest.approx(0.025)]
    # one process is a supported layout: DCP's "torch.distributed is disabled" warning is not shown
    assert [str(w.message) for w in seen + seen_load if "torch.distributed" in str(w.message)] == []


def test_a_checkpoint_without_a_scheduler_or_this_ranks_rng_loads_and_keeps_the_seed(tmp_path: Path) -> None:
    out = str(tmp_path)
    layer, optimizer, _ = _layer(0.25)
    uri = checkpoint.save(
        out, 1, layer, optimizer, {"step": 1}, staging_root=str(tmp_path / "s"), keep_last=1
    )
    assert "scheduler.pt" not in _files(Path(uri))
    Path(uri, "rng", "rank_00000.pt").unlink()  # saved by fewer ranks than load it
    torch.manual_seed(11)
    expected = torch.rand(3).tolist()
    torch.manual_seed(11)
    fresh, fresh_opt, _ = _layer(0.0)
    torch.manual_seed(11)
    assert checkpoint.load(uri, fresh, fresh_opt, staging_root=str(tmp_path / "s")) == {"step": 1}
    assert torch.rand(3).tolist() == expected
    assert torch.equal(fresh.weight, torch.full((2, 3), 0.25))


def test_saving_a_step_again_replaces_its_leftovers_and_prunes(tmp_path: Path) -> None:
    out = str(tmp_path)
    layer, optimizer, _ = _layer(0.5)
    stale = Path(checkpoint.step_dir(out, 2))
    (stale / "model_optim").mkdir(parents=True)
    (stale / "model_optim" / "__7_0.distcp").write_text("from a run killed while writing step 2")
    (stale / "junk").write_text("x")
    for step in (1, 2, 3):
        checkpoint.save(
            out, step, layer, optimizer, {"step": step}, staging_root=str(tmp_path / "s"), keep_last=2
        )
    assert _steps(out) == [(2, True), (3, True)]
    assert _files(stale) == [
        "_COMPLETE",
        "model_optim/.metadata",
        "model_optim/__0_0.distcp",
        "rng/rank_00000.pt",
        "trainer.json",
    ]
    assert not (tmp_path / "s").exists()  # a local output is written in place: no staging copy


def test_save_to_s3_uploads_from_staging_and_clears_it(tmp_path: Path, s3_bucket: str) -> None:
    out = f"{s3_bucket}/run"
    layer, optimizer, scheduler = _layer(0.5)
    staging = tmp_path / "stage"
    leftover = staging / "step_00000004" / "model_optim" / "__3_0.distcp"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("a staging copy of a run killed while saving")
    storage.write_bytes(f"{out}/checkpoints/step_00000004/junk", b"x")
    uri = checkpoint.save(
        out, 4, layer, optimizer, {"step": 4}, staging_root=str(staging), keep_last=1, scheduler=scheduler
    )
    assert uri == f"{out}/checkpoints/step_00000004"
    assert sorted(u[len(uri) + 1 :] for u in storage.list_uris(uri)) == ONE_RANK_CHECKPOINT
    assert storage.completion_info(uri)["info"] == {"step": 4}
    assert not (staging / "step_00000004").exists()
    fresh, fresh_opt, _ = _layer(0.0)
    part = tmp_path / "r" / "resume" / "step_00000004.part"  # a download cut short by a kill
    part.mkdir(parents=True)
    (part / "trainer.json").write_text('{"step": 99}')
    stale = tmp_path / "r" / "resume" / "step_00000004"  # and an earlier copy without its marker
    stale.mkdir()
    (stale / "stray.pt").write_text("not of this checkpoint")
    assert checkpoint.load(uri, fresh, fresh_opt, staging_root=str(tmp_path / "r")) == {"step": 4}
    assert _files(tmp_path / "r") == [
        f"resume/step_00000004/{n}"
        for n in ("_COMPLETE", "model_optim/.metadata", "model_optim/__0_0.distcp", "rng/rank_00000.pt")
    ] + ["resume/step_00000004/scheduler.pt", "resume/step_00000004/trainer.json"]
    assert torch.equal(fresh.weight, torch.full((2, 3), 0.5))


def test_cuda_rng_states_are_saved_and_restored_where_cuda_is_present(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No GPU here: torch.cuda's RNG calls are stood in for (the only part that cannot run on this machine)."""
    states = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3], dtype=torch.uint8)]
    restored: list[list[torch.Tensor]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: states)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    state = checkpoint._rng_state()
    assert sorted(state) == ["cuda", "numpy", "python", "torch"] and state["cuda"] is states
    checkpoint._set_rng_state(state)
    assert restored == [states]
    checkpoint._set_rng_state({k: v for k, v in state.items() if k != "cuda"})  # saved on a CPU-only machine
    assert restored == [states]


class _Wrapped(torch.nn.Module):
    """SFT's shape: the Hugging Face model is the ``inner`` attribute of the trained module."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner


def test_save_hf_casts_floating_tensors_only_and_leaves_a_mixed_state_as_saved(
    tiny_model_dir: str, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    from paravt_core.models import load

    model = load(tiny_model_dir).model
    state = dict(model.state_dict())
    state["model.language_model.norm.weight"] = state["model.language_model.norm.weight"].to(torch.float16)
    checkpoint.save_hf(model, str(tmp_path / "bf16"), state, torch.bfloat16)
    saved = load_file(str(tmp_path / "bf16" / "model.safetensors"))
    assert {v.dtype for v in saved.values()} == {torch.bfloat16}
    assert torch.equal(saved["lm_head.weight"], model.lm_head.weight.to(torch.bfloat16))
    # no dtype and two floating dtypes: none is "the" dtype, the config keeps what save_pretrained wrote
    checkpoint.save_hf(model, str(tmp_path / "mixed"), state, None)
    saved = load_file(str(tmp_path / "mixed" / "model.safetensors"))
    assert saved["model.language_model.norm.weight"].dtype == torch.float16
    assert saved["lm_head.weight"].dtype == torch.float32
    config = json.loads((tmp_path / "mixed" / "config.json").read_text())
    assert (config["dtype"], config["text_config"]["dtype"]) == ("float32", "float32")


def test_a_first_save_final_to_s3_makes_its_staging_folder_and_removes_it(
    tiny_model_dir: str, tmp_path: Path, s3_bucket: str
) -> None:
    """The usual case: no staging copy of ``final/`` is left from before (a rank's staging root may not even
    exist yet); the checkpoint is staged, uploaded and its staging copy removed."""
    from paravt_core.models import load

    loaded = load(tiny_model_dir)
    staging = tmp_path / "fresh"
    uri = checkpoint.save_final(
        f"{s3_bucket}/first", loaded.model, loaded.processor, staging_root=str(staging)
    )
    assert uri == f"{s3_bucket}/first/final" and storage.is_complete(uri)
    assert storage.exists(f"{uri}/model.safetensors") and storage.exists(f"{uri}/config.json")
    assert not (staging / "final").exists()


def test_save_final_of_a_submodule_to_s3_uploads_its_weights_and_clears_only_its_staging(
    tiny_model_dir: str, tmp_path: Path, s3_bucket: str
) -> None:
    from safetensors.torch import load_file

    from paravt_core.models import load

    loaded = load(tiny_model_dir)
    staging = tmp_path / "stage"
    (staging / "resume").mkdir(parents=True)
    (staging / "resume" / "keep").write_text("another use of this rank's staging folder")
    (staging / "final").mkdir()
    (staging / "final" / "stale.bin").write_text("left by a run killed while uploading")
    out = f"{s3_bucket}/sft"
    storage.write_bytes(f"{out}/final/old.bin", b"x")  # an earlier final/ of this output
    uri = checkpoint.save_final(
        out, _Wrapped(loaded.model), loaded.processor, staging_root=str(staging), dtype=torch.bfloat16,
        submodule="inner",
    )  # fmt: skip
    assert uri == f"{out}/final" and storage.is_complete(uri)
    names = [u[len(uri) + 1 :] for u in storage.list_uris(uri)]
    assert (
        names
        == [  # the model's and processor's files only: the older final/ and the stale staging are gone
            "_COMPLETE",
            "chat_template.jinja",
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "processor_config.json",
            "tokenizer.json",
            "tokenizer_config.json",
        ]
    )
    assert _files(staging) == ["resume/keep"]
    storage.download_file(f"{uri}/model.safetensors", str(tmp_path / "w.safetensors"))
    saved = load_file(str(tmp_path / "w.safetensors"))
    expected = {k: v.to(torch.bfloat16) for k, v in loaded.model.state_dict().items()}
    assert sorted(saved) == sorted(expected)  # the names without the wrapper's "inner." prefix
    assert all(torch.equal(saved[k], expected[k]) for k in saved)


# 4, 5 -------------------------------------------------------------------------------------------------------
def _config_dtypes(folder: Path) -> dict[str, str]:
    config = json.loads((folder / "config.json").read_text())
    return {key: config[key]["dtype"] for key in ("text_config", "vision_config")} | {"": config["dtype"]}


def test_save_hf_writes_the_saved_tensors_dtype_when_none_is_given(tiny_model_dir, tmp_path):
    """``DiskSync`` and ``save_final`` pass no dtype by default: a bf16 state dict of a float32 module is
    written as bfloat16 and its config.json must say so (``save_pretrained`` records the module's float32)."""
    from paravt_core.checkpoint import save_hf
    from paravt_core.models import load

    model = load(tiny_model_dir).model
    state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in model.state_dict().items()}
    save_hf(model, str(tmp_path / "bf16"), state, None)
    assert _config_dtypes(tmp_path / "bf16") == {"": "bfloat16", "text_config": "bfloat16",
                                                 "vision_config": "bfloat16"}  # fmt: skip
    save_hf(model, str(tmp_path / "fp32"), model.state_dict(), None)
    assert set(_config_dtypes(tmp_path / "fp32").values()) == {"float32"}


def test_saving_a_bf16_copy_leaves_the_live_models_config_float32(tiny_model_dir, tmp_path):
    from paravt_core.checkpoint import save_hf
    from paravt_core.models import load

    model = load(tiny_model_dir).model
    save_hf(model, str(tmp_path / "bf16"), model.state_dict(), torch.bfloat16)
    assert set(_config_dtypes(tmp_path / "bf16").values()) == {"bfloat16"}
    live = (model.config, model.config.text_config, model.config.vision_config)
    assert [str(c.dtype).removeprefix("torch.") for c in live] == ["float32"] * 3
    assert {p.dtype for p in model.parameters()} == {torch.float32}
