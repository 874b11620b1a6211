"""The data component run by Kubeflow's own local runner (SubprocessRunner, no venv).

Inputs are the synthetic ParaVT dataset; expected values come from reading the synthetic parquets
directly and joining each sentinel path onto the media root by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from paravt_core import storage
from paravt_core.config import DataConfig
from paravt_core.synth import SynthResult
from pipelines.local import run_data_locally


def _media_urls(messages_json: str) -> list[str]:
    urls = []
    for message in json.loads(messages_json):
        for part in message["content"]:
            for kind in ("video_url", "image_url"):
                if part.get("type") == kind:
                    urls.append(part[kind]["url"])
    return urls


def _data_config(synth: SynthResult, work: Path, output: str, media_prefix: str = "") -> DataConfig:
    return DataConfig.model_validate(
        {
            "work_dir": str(work),
            "output": output,
            "download": {"media_source": str(synth.source_dir), "parquet_source": str(synth.parquet_dir)},
            "materialize": {"media_prefix": media_prefix},
        }
    )


def _read_parquet(uri: str):
    import io

    return pq.read_table(io.BytesIO(storage.read_bytes(uri)))


def _check_materialized(synth: SynthResult, data_uri: str, media_prefix: str) -> None:
    inputs = {Path(p).name: pq.read_table(p) for p in synth.sft_parquets + synth.rl_parquets}
    audit = json.loads(storage.read_bytes(storage.join(data_uri, "audit.json")))
    assert audit["totals"]["rows"] == sum(t.num_rows for t in inputs.values())
    assert audit["totals"]["kept"] == audit["totals"]["rows"]
    assert audit["totals"]["missing_file_rows"] == 0 and audit["totals"]["passed"] is True

    for name, source in inputs.items():
        kind = "rl" if name.startswith("paravt_rl_") else "sft"
        out = _read_parquet(storage.join(data_uri, kind, name))
        assert out.schema.names == source.schema.names  # every column kept, order too
        assert out.column("id").to_pylist() == source.column("id").to_pylist()
        if kind == "sft":
            for before, after in zip(
                source.column("messages").to_pylist(), out.column("messages").to_pylist(), strict=True
            ):
                want = [storage.join(media_prefix, u) for u in _media_urls(before)]
                assert _media_urls(after) == want
                # Only the paths changed: the rest of the conversation is byte-identical.
                stripped_after = after
                for old, new in zip(_media_urls(before), want, strict=True):
                    stripped_after = stripped_after.replace(new, old, 1)
                assert json.loads(stripped_after) == json.loads(before)
        else:
            for before, after in zip(
                source.column("videos").to_pylist(), out.column("videos").to_pylist(), strict=True
            ):
                assert [v["video"] for v in after] == [storage.join(media_prefix, v["video"]) for v in before]
            assert out.column("extra_info").to_pylist() == source.column("extra_info").to_pylist()

    # Every video of the manifest is reachable at its materialized location.
    for video in synth.manifest["videos"]:
        assert storage.exists(storage.join(media_prefix, video["path"])), video["path"]


def test_data_component_runs_locally(synth_dataset: SynthResult, tmp_path: Path) -> None:
    output = str(tmp_path / "data")
    cfg = _data_config(synth_dataset, tmp_path / "work", output)
    data_uri = run_data_locally(cfg, str(tmp_path / "kfp-root"))

    assert data_uri == output
    assert storage.is_complete(output)
    media_root = str((tmp_path / "work" / "media").resolve())
    _check_materialized(synth_dataset, output, media_root)
    # The KFP audit artifact is a copy of the stage's audit.json.
    artifacts = list((tmp_path / "kfp-root").rglob("data-op/audit"))
    assert len(artifacts) == 1
    assert json.loads(artifacts[0].read_text()) == json.loads((tmp_path / "data" / "audit.json").read_text())
    saved = (tmp_path / "data" / "config.yaml").read_text()
    assert str(synth_dataset.source_dir) in saved


def test_data_component_to_s3(synth_dataset: SynthResult, tmp_path: Path, s3_env, s3_bucket: str) -> None:
    """Same component, outputs and media in the real S3 server; credentials only via the environment."""
    output = f"{s3_bucket}/runs/1/data"
    media = f"{s3_bucket}/media"
    cfg = _data_config(synth_dataset, tmp_path / "work", output, media_prefix=media)
    data_uri = run_data_locally(cfg, str(tmp_path / "kfp-root"))

    assert data_uri == output
    assert storage.is_complete(output)
    _check_materialized(synth_dataset, output, media)
    config_text = storage.read_bytes(storage.join(output, "config.yaml")).decode()
    assert s3_env.secret_key not in config_text


def test_data_component_in_a_pipeline_writes_to_the_run_and_extracts_on_the_media_volume(
    synth_dataset: SynthResult, tmp_path: Path
) -> None:
    """As the train DAG calls it: a config that leaves output, work_dir and the extraction root at
    their defaults. The output goes to ``<run_prefix>/data`` (shared storage, not the pod), the media are extracted on the
    media volume (``media_root``), downloads go beside them (``<media_root>/.downloads``); the ``dataset`` artifact
    points at the output (kfp.local's URIs carry no run id, so through its metadata)."""
    from kfp import local

    from components.data import data_op
    from paravt_core.config import config_to_yaml

    cfg = DataConfig.model_validate(
        {
            "download": {
                "media_source": str(synth_dataset.source_dir),
                "parquet_source": str(synth_dataset.parquet_dir),
            }
        }
    )
    yaml_text = config_to_yaml(cfg)  # output, work_dir and extract.root at their defaults
    run_prefix, media = str(tmp_path / "bucket" / "run-1"), tmp_path / "media-volume"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "kfp-root"))
    task = data_op(
        config_yaml=yaml_text, overrides=[], run_prefix=run_prefix, run_id="run-1", media_root=str(media)
    )
    data_uri = task.outputs["Output"]
    assert data_uri == f"{run_prefix}/data" and storage.is_complete(data_uri)
    assert task.outputs["dataset"].metadata["uri"] == data_uri
    _check_materialized(synth_dataset, data_uri, str(media))
    saved = yaml.safe_load(storage.read_bytes(storage.join(data_uri, "config.yaml")))
    assert saved["work_dir"] == str(media / ".downloads") and saved["extract"]["root"] == str(media)
