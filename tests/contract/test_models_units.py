"""``paravt_core/models.py`` rule by rule, in-process: the tiny model's Qwen3-VL shape as saved, the loaders'
options, the offline switch, the hub and s3 resolution. Written for the survivors of the module's mutation run
(docs/mutation.md); the expected values are the tiny model's design (its docstring) and the libraries' layouts."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from paravt_core import models, storage
from paravt_core.models import Loaded, build_tiny_model, default_cache_dir, load, load_processor_only


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_tiny_model_is_saved_with_qwen3_vl_shapes(tiny_model_dir: str, tiny_model: Loaded) -> None:
    cfg = _json(Path(tiny_model_dir) / "config.json")
    text, vision = cfg["text_config"], cfg["vision_config"]
    # grouped-query attention: 2 query heads share 1 key/value head of 32 dims
    assert (text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"]) == (2, 1, 32)
    assert text["max_position_embeddings"] == 32768
    # interleaved multimodal RoPE whose T/H/W sections cover the head's 16 rotary pairs, Qwen3-VL's theta
    assert text["rope_parameters"] == {
        "rope_type": "default",
        "rope_theta": 5_000_000.0,
        "mrope_section": [6, 5, 5],
        "mrope_interleaved": True,
    }
    assert sum(text["rope_parameters"]["mrope_section"]) == text["head_dim"] // 2
    ids = tiny_model.tokenizer.convert_tokens_to_ids
    assert (text["eos_token_id"], text["pad_token_id"]) == (ids("<|im_end|>"), ids("<|endoftext|>"))
    assert (vision["num_heads"], vision["patch_size"], vision["temporal_patch_size"]) == (2, 16, 2)
    assert vision["num_position_embeddings"] == 16 * 16  # a square grid of learned positions
    assert cfg["tie_word_embeddings"] is False
    # the processors cut the same 16-px patches the vision tower embeds, normalised to [-1, 1]
    image = _json(Path(tiny_model_dir) / "processor_config.json")["image_processor"]
    assert (image["patch_size"], image["temporal_patch_size"], image["merge_size"]) == (16, 2, 2)
    assert image["image_mean"] == image["image_std"] == [0.5, 0.5, 0.5]
    video = _json(Path(tiny_model_dir) / "processor_config.json")["video_processor"]
    assert (video["patch_size"], video["fps"], video["min_frames"], video["max_frames"]) == (16, 2.0, 4, 16)
    assert video["image_mean"] == [0.5, 0.5, 0.5]
    generation = _json(Path(tiny_model_dir) / "generation_config.json")  # Qwen3-VL-Instruct's sampling
    assert (generation["temperature"], generation["top_p"], generation["top_k"]) == (0.7, 0.8, 20)


def test_the_tiny_models_files_are_readable_by_everyone_and_executable_by_none(tiny_model_dir: str) -> None:
    for f in Path(tiny_model_dir).iterdir():
        mode = stat.S_IMODE(f.stat().st_mode)
        assert mode & 0o444 == 0o444 and mode & 0o111 == 0, (f.name, oct(mode))


def test_a_tiny_model_is_built_under_folders_that_do_not_exist_yet(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "tiny"
    assert build_tiny_model(str(out)) == str(out)
    assert (out / "config.json").is_file()


def test_a_folder_that_is_not_a_tiny_model_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        build_tiny_model(str(tmp_path))
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_load_with_dtype_auto_keeps_the_checkpoints_dtype(tiny_model_dir: str) -> None:
    loaded = load(tiny_model_dir, dtype="auto")
    assert {str(p.dtype) for p in loaded.model.parameters()} == {"torch.float32"}


def test_load_processor_only_reads_no_weights(tiny_model_dir: str) -> None:
    loaded = load_processor_only("file://" + tiny_model_dir)
    assert loaded.model is None
    assert loaded.tokenizer is loaded.processor.tokenizer
    assert type(loaded.config).__name__ == "Qwen3VLConfig"
    assert loaded.config.text_config.hidden_size == 64
    assert loaded.path == str(Path(tiny_model_dir).resolve())


def test_the_model_cache_is_the_env_folder_or_under_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PARAVT_MODEL_CACHE", str(tmp_path / "cache"))
    assert default_cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("PARAVT_MODEL_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "paravt" / "models"


@pytest.mark.parametrize(
    ("hub", "transformers", "offline"),
    [
        ("", "", False),
        ("0", "", False),
        ("1", "", True),
        ("", "ON", True),
        ("on", "", True),
        ("", "yes", True),
    ],
)
def test_offline_is_either_switch_set_to_a_true_word(
    monkeypatch: pytest.MonkeyPatch, hub: str, transformers: str, offline: bool
) -> None:
    for name, value in (("HF_HUB_OFFLINE", hub), ("TRANSFORMERS_OFFLINE", transformers)):
        if value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    assert models._offline() is offline


def _hub_cache(home: Path, repo: str, files: dict[str, str]) -> Path:
    """huggingface_hub's cache layout (``hub/models--owner--name/{refs/main,snapshots/<commit>/...}``)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = home / "hub" / ("models--" + repo.replace("/", "--"))
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, text in files.items():
        (snap / name).write_text(text)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    return snap


def test_an_offline_hub_id_resolves_to_its_cached_snapshot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    snap = _hub_cache(tmp_path, "someone/model", {"config.json": "{}"})
    monkeypatch.chdir(tmp_path)  # "someone/model" is no local folder here
    assert models.resolve_model_dir("someone/model") == snap.resolve()
    with pytest.raises(FileNotFoundError) as err:
        models.resolve_model_dir("someone/absent")
    assert str(err.value).startswith(
        "model 'someone/absent': not a local directory and not found in the local hub cache (HF_HUB_OFFLINE is set): "
    )


def test_the_s3_fingerprint_lists_exactly_the_checkpoints_prefix(s3_bucket: str) -> None:
    for key, body in (("ckpt/a/config.json", b"{}"), ("ckpt/a/w.bin", b"12345"), ("ckpt/ab/x", b"no")):
        storage.write_bytes(f"{s3_bucket}/{key}", body)
    for uri in (f"{s3_bucket}/ckpt/a", f"{s3_bucket}/ckpt/a/"):
        objects = json.loads(models._s3_fingerprint(uri))
        assert [(k, size) for k, size, _ in objects] == [("ckpt/a/config.json", 2), ("ckpt/a/w.bin", 5)]
        assert all(etag for _, _, etag in objects)


def test_a_hub_id_the_hub_cannot_serve_is_named_with_the_hub_as_the_place(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # online mode against a hub endpoint on a closed loopback port (nothing leaves the machine): refused
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        models.resolve_model_dir("someone/absent")
    assert str(err.value).startswith(
        "model 'someone/absent': not a local directory and not found on the hub: "
    )


def test_an_s3_checkpoint_downloads_beside_its_cache_entry_then_takes_its_place(
    s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partial download is a hidden sibling of the cache entry (one rename on the same file system makes it
    the entry; a folder under /tmp may be another file system, where the rename fails)."""
    storage.write_bytes(f"{s3_bucket}/ckpt/tiny/config.json", b"{}")
    real = storage.download_dir
    into: list[Path] = []

    def download_dir(uri: str, dest: str) -> list[str]:  # the real download, its destination noted
        into.append(Path(dest))
        return real(uri, dest)

    monkeypatch.setattr(storage, "download_dir", download_dir)
    local = models._from_s3(f"{s3_bucket}/ckpt/tiny/", tmp_path / "cache")
    assert local == tmp_path / "cache" / "s3" / s3_bucket.removeprefix("s3://") / "ckpt" / "tiny"
    assert len(into) == 1 and into[0].parent == local.parent and into[0].name.startswith(".tiny.part-")
    assert not into[0].exists() and (local / "config.json").read_text() == "{}"
    assert sorted(p.name for p in local.parent.iterdir()) == [".tiny.lock", "tiny"]


# 6 ----------------------------------------------------------------------------------------------------------
def test_bars_off_restores_the_callers_state_in_both_directions():
    from transformers.utils import logging as hf_logging

    from paravt_core.models import hf_bars_off

    was = hf_logging.is_progress_bar_enabled()
    try:
        for before in (True, False, True):
            (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
            with hf_bars_off():
                assert not hf_logging.is_progress_bar_enabled()
            assert hf_logging.is_progress_bar_enabled() is before
            with pytest.raises(KeyError), hf_bars_off():  # a load that fails restores it too
                raise KeyError("x")
            assert hf_logging.is_progress_bar_enabled() is before
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
