"""The KFP launchers (``components/launchers/*``) called in-process with stand-in KFP artifacts (kfp.dsl's own
classes, under tmp dirs): the paths, URIs, keys and HTML text they work out, checked against values by hand.

The one-node SFT and RL steps find a complete output of their stage made with the same config (written with
the stage lifecycle's own ``StageRun``), so the stage reuses it and the step goes on to publish it: the whole
step runs, nothing is trained. The data step runs the data stage on the session's synthetic dataset; the eval
step the tiny model on one fixture row; the report, ablation and nightly steps their real writers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Markdown, Metrics, Model

from paravt_core import storage
from paravt_core.launch.caches import CACHE_ENV
from paravt_core.stage import StageRun

RUN = "run-7"
NO_RERUN = ["launch.retries=0"]  # a mutant that sends the stage elsewhere fails at once, not after reruns


@pytest.fixture(autouse=True)
def _pod_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # the launchers set KFP_RUN_ID and settle_caches may drop cache variables: restored after each test
    import torch

    monkeypatch.setenv("KFP_RUN_ID", "before")
    # a CPU pod wherever the tests run: the steps' GPU rules (CPU configs refused beside GPUs) stay out of it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in CACHE_ENV:
        monkeypatch.delenv(name, raising=False)


def _root(tmp_path: Path) -> Path:
    """The run's directory under the pipeline root, as KFP's driver lays out the artifacts' URIs."""
    return tmp_path / "pipe" / RUN


def _out(cls: type, tmp_path: Path, name: str) -> Any:
    """An output artifact as KFP's executor hands it: its URI under the run's directory (a local URI is its own
    local path: kfp's ``Artifact.path``)."""
    uri = _root(tmp_path) / "task" / "salt" / name
    uri.parent.mkdir(parents=True, exist_ok=True)
    return cls(name=name, uri=str(uri))


def _complete(stage: str, cfg: Any, files: dict[str, bytes]) -> None:
    """A complete output of ``stage`` made with ``cfg``, as the stage's lifecycle leaves one."""
    life = StageRun.open(stage, cfg.output)
    life.begin(cfg)
    for name, data in files.items():
        storage.write_bytes(storage.join(cfg.output, name), data)
    life.done({}, {})


# -- the one-node SFT and RL steps: the default output under the run's root, the published artifacts ----------


def _sft(tmp_path: Path, output: str, **kw: str) -> tuple[str, Any, Any, Any, Any]:
    from components.launchers.sft import sft_step

    arts = [
        _out(c, tmp_path, n)
        for c, n in ((HTML, "curve"), (Metrics, "metrics"), (Model, "model"), (Artifact, "tb"))
    ]
    data = Dataset(name="data", uri=str(tmp_path / "data"))
    return (
        sft_step("{}", NO_RERUN, data, str(tmp_path / "base"), *arts, output=output, run_id=RUN, **kw),
        *arts,
    )


def test_the_sft_step_writes_under_the_run_prefix_unless_given_an_output(tmp_path: Path) -> None:
    from components.launchers import stage_config
    from paravt_core.config import SftConfig

    prefix = tmp_path / "runs" / "r1"
    for out in (prefix / "sft", tmp_path / "mine"):
        cfg = stage_config(SftConfig, "{}", NO_RERUN)
        cfg.data.input, cfg.model.uri, cfg.output = str(tmp_path / "data"), str(tmp_path / "base"), str(out)
        _complete("sft", cfg, {"metrics.json": b'{"steps": 3, "loss": 0.5}', "loss_curve.png": b"PNG1"})
    final, curve, m, model, tb = _sft(tmp_path, "", run_prefix=f"{prefix}/")
    assert final == model.metadata["uri"] == f"{prefix}/sft/final"
    assert tb.metadata["logdir"] == f"{prefix}/sft/tensorboard"
    assert Path(curve.path).read_text() == '<img alt="SFT loss" src="data:image/png;base64,UE5HMQ==">'
    assert m.metadata == {"steps": 3, "loss": 0.5}  # reused_output (a bool) is not a number
    assert os.environ["KFP_RUN_ID"] == RUN
    final, *_ = _sft(tmp_path, str(tmp_path / "mine"), run_prefix=str(prefix))  # an output given wins
    assert final == f"{tmp_path}/mine/final"


def _rl(tmp_path: Path, output: str, **kw: str) -> tuple[str, Any, Any, Any, Any]:
    from components.launchers.rl import rl_step

    arts = [
        _out(c, tmp_path, n)
        for c, n in ((Artifact, "curves"), (Metrics, "metrics"), (Model, "trained"), (Artifact, "tb"))
    ]
    data = Dataset(name="data", uri=str(tmp_path / "data"))
    return (
        rl_step("{}", NO_RERUN, data, str(tmp_path / "sft"), *arts, output=output, run_id=RUN, **kw),
        *arts,
    )


def test_the_rl_step_writes_under_the_run_root_unless_given_an_output_and_publishes_its_tensorboard(
    tmp_path: Path,
) -> None:
    from components.launchers import stage_config
    from paravt_core.rl.config import RlConfig

    root = _root(tmp_path)  # no run_prefix: the run's directory cut off the artifacts' URIs
    prefix = tmp_path / "runs" / "r1"
    for out in (root / "rl", prefix / "rl", tmp_path / "mine"):
        cfg = stage_config(RlConfig, "{}", NO_RERUN)
        cfg.data, cfg.model, cfg.output = str(tmp_path / "data"), str(tmp_path / "sft"), str(out)
        _complete("rl", cfg, {"metrics.json": b'{"steps": 3}', "curves.png": b"PNG2"})
    final, curves, m, trained, tb = _rl(tmp_path, "")
    # under the run root: exposed as the artifacts' URIs
    assert final == trained.metadata["uri"] == trained.uri == f"{root}/rl/final"
    assert tb.metadata == {"logdir": f"{root}/rl/tensorboard", "uri": f"{root}/rl/tensorboard"}
    assert tb.uri == f"{root}/rl/tensorboard"
    assert Path(curves.path).read_bytes() == b"PNG2" and curves.metadata["uri"] == f"{root}/rl/curves.png"
    assert m.metadata == {"steps": 3}
    final, _, _, trained, tb = _rl(tmp_path, "", run_prefix=f"{prefix}/")  # a run prefix: under it
    assert final == trained.metadata["uri"] == f"{prefix}/rl/final"
    assert tb.metadata["logdir"] == f"{prefix}/rl/tensorboard"
    final, _, _, trained, tb = _rl(
        tmp_path, str(tmp_path / "mine"), run_prefix=str(prefix)
    )  # an output given wins
    assert final == trained.metadata["uri"] == f"{tmp_path}/mine/final"
    assert tb.metadata["logdir"] == f"{tmp_path}/mine/tensorboard"
    # outside the run root: the URIs stay, the metadata points at the location
    assert (tb.uri, trained.uri) == (
        str(root / "task" / "salt" / "tb"),
        str(root / "task" / "salt" / "trained"),
    )


# -- the data step: media_root under the mount, the stage's output, extraction root and downloads folder ------


def _data(tmp_path: Path, synth: Any, **kw: str) -> tuple[str, Any, Any, Any]:
    from components.launchers.data import data_step

    overrides = [f"download.media_source={synth.source_dir}", f"download.parquet_source={synth.parquet_dir}"]
    arts = [
        _out(c, tmp_path, n) for c, n in ((Artifact, "audit"), (Metrics, "metrics"), (Dataset, "dataset"))
    ]
    return (data_step("{}", overrides, *arts, run_id=RUN, **kw), *arts)


def test_the_data_step_extracts_under_media_root_and_downloads_beside_it(
    tmp_path: Path, synth_dataset
) -> None:
    """media_root under the media volume's mount: the extraction root, and ``<media_root>/.downloads`` the
    stage's ``work_dir`` (its download folder: local sources are read in place, so the resolved config the
    stage saved says it), the data under the run's root."""
    mount = tmp_path / "mnt" / "media"
    data, audit, metrics, dataset = _data(
        tmp_path, synth_dataset, media_root=f"{mount}/videos/", media_mount=f"{mount}/"
    )
    root = _root(tmp_path)
    assert data == dataset.uri == dataset.metadata["uri"] == f"{root}/data"
    assert (mount / "videos" / "museg" / "charades" / "244TO.mp4").is_file()  # extracted under media_root
    assert audit.metadata["uri"] == f"{root}/data/audit.json"
    assert Path(audit.path).read_bytes() == (root / "data" / "audit.json").read_bytes()
    config = (root / "data" / "config.yaml").read_text()
    assert f"root: {mount}/videos\n" in config and f"work_dir: {mount}/videos/.downloads\n" in config
    assert metrics.metadata and all(isinstance(v, int | float) for v in metrics.metadata.values())


def test_the_data_step_refuses_a_media_root_or_extract_root_outside_the_mount(tmp_path: Path) -> None:
    """Checked before the config is read or anything run: after normalising (``..`` leaves the mount)."""
    from components.launchers.data import data_step

    arts = [
        _out(c, tmp_path, n) for c, n in ((Artifact, "audit"), (Metrics, "metrics"), (Dataset, "dataset"))
    ]
    for root, shown in (("/mnt/media-other", "/mnt/media-other"), ("/mnt/media/../../tmp", "/tmp")):
        with pytest.raises(ValueError) as err:
            data_step("{}", [], *arts, run_id=RUN, media_root=root, media_mount="/mnt/media/")
        assert str(err.value) == (
            f"media_root '{shown}' is not under the media volume's mount '/mnt/media/': the extraction would "
            "stay in this pod; use a directory under the mount (the volume cannot move)"
        )
    with pytest.raises(
        ValueError, match=r"^extract.root 'media' is not under the media volume's mount '/mnt/media'"
    ):
        data_step(
            "extract: {root: media}",
            [],
            *arts,
            run_id=RUN,
            media_root="/mnt/media/v",
            media_mount="/mnt/media",
        )
    assert not _root(tmp_path).joinpath("data").exists()


def test_the_data_step_without_a_mount_takes_any_media_root(
    tmp_path: Path, synth_dataset, monkeypatch
) -> None:
    """No media volume (``media_mount`` empty: a local run): nothing to be under, a relative root too."""
    monkeypatch.chdir(tmp_path)
    data, *_ = _data(tmp_path, synth_dataset, media_root="media")
    assert data == f"{_root(tmp_path)}/data"
    config = (_root(tmp_path) / "data" / "config.yaml").read_text()
    assert "root: media\n" in config and "work_dir: media/.downloads\n" in config
    assert (tmp_path / "media" / "museg" / "charades" / "244TO.mp4").is_file()


# -- the eval step: the report page and its URI, unsharded and as one shard ----------------------------------


def _eval_yaml(tmp_path: Path, eval_fixtures: list[dict]) -> str:
    from tests.support.eval_support import TINY_AGENT, fixture_entry

    return yaml.safe_dump({
        "benchmarks": [{**fixture_entry(eval_fixtures, "mlvu"), "limit": 1}], "protocols": ["direct"],
        "agent": TINY_AGENT, "judge": {"enabled": False}, "max_error_share": 1.0,
        "work_dir": str(tmp_path / "work"), "runner": {"concurrency": 1, "retries": 0, "backoff_s": 0.0},
    })  # fmt: skip


def test_the_eval_step_publishes_its_report_and_a_shard_says_where_its_records_are(
    tmp_path: Path, tiny_model_dir: str, eval_fixtures: list[dict]
) -> None:
    from components.launchers.eval import eval_step

    prefix, text = tmp_path / "runs" / "r1", _eval_yaml(tmp_path, eval_fixtures)
    report, metrics = _out(HTML, tmp_path, "report"), _out(Metrics, tmp_path, "metrics")
    where = eval_step(text, [], "mlvu", "1", report, metrics, model=tiny_model_dir, run_prefix=str(prefix),
                      train_run_id=RUN)  # fmt: skip
    assert where == report.metadata["uri"] == f"{prefix}/eval/mlvu"
    assert report.metadata["gpus"] == "1" and os.environ["KFP_RUN_ID"] == RUN
    assert Path(report.path).read_bytes() == (prefix / "eval" / "mlvu" / "report.html").read_bytes()
    assert metrics.metadata["total.samples"] == 1

    report, metrics = _out(HTML, tmp_path, "shard-report"), _out(Metrics, tmp_path, "shard-metrics")
    where = eval_step(text, [], "mlvu", "1", report, metrics, model=tiny_model_dir,
                      output_prefix=str(tmp_path / "sharded"), shard="0/1")  # fmt: skip
    assert where == report.metadata["uri"] == f"{tmp_path}/sharded/mlvu/shards/0-of-1"
    assert Path(report.path).read_text() == (
        f"<p>paravt eval mlvu, shard 0/1: 1 records in {tmp_path}/sharded/mlvu/shards/0-of-1</p>"
    )
    assert metrics.metadata == {"records": 1}


def _mark(output: Path, stage: str, files: dict[str, bytes]) -> None:
    """A complete output of ``stage`` holding ``files`` (its ``_COMPLETE`` naming the stage)."""
    for name, data in files.items():
        storage.write_bytes(str(output / name), data)
    storage.mark_complete(str(output), {"stage": stage})


def test_the_eval_merge_step_of_one_shard_publishes_the_nights_output(tmp_path: Path) -> None:
    """Nightly (a run id): the output is ``<output_prefix>/<night>/<benchmark>``, the night as given."""
    from components.launchers.eval import eval_merge_step

    out = tmp_path / "results" / "2026-11-30" / "mlvu"
    _mark(out, "eval", {"report.html": b"<p>mlvu</p>", "metrics.json": b'{"total.samples": 4}'})
    report, metrics, tb = (
        _out(HTML, tmp_path, "report"),
        _out(Metrics, tmp_path, "metrics"),
        _out(Artifact, tmp_path, "tb"),
    )
    got = eval_merge_step("{}", [], "mlvu", 1, report, metrics, tb, model="m",
                          output_prefix=str(tmp_path / "results"), night="2026-11-30", run_id=RUN)  # fmt: skip
    assert got == report.metadata["uri"] == str(out)
    assert Path(report.path).read_bytes() == b"<p>mlvu</p>" and metrics.metadata == {"total.samples": 4}
    assert tb.metadata["logdir"] == f"{out}/tensorboard"


# -- the report steps: where they write, what they read, their artifacts' keys -----------------------------------


def test_night_start_step_records_the_checkpoint_and_returns_the_nights_folder(tmp_path: Path) -> None:
    from components.launchers.report import night_start_step

    prefix = str(tmp_path / "results")
    assert night_start_step(prefix, "2026-11-30", RUN, "s3://b/ckpt") == f"{prefix}/2026-11-30"
    night = json.loads((tmp_path / "results" / "nights" / "2026-11-30.json").read_text())
    assert (night["date"], night["state"], night["checkpoint"], night["run_id"]) == (
        "2026-11-30", "RUNNING", "s3://b/ckpt", RUN,
    )  # fmt: skip


def test_nightly_report_step_writes_the_nights_report_and_publishes_its_pages(tmp_path: Path) -> None:
    from components.launchers.report import night_start_step, nightly_report_step

    prefix = str(tmp_path / "results")
    night_start_step(prefix, "2026-11-30", RUN, "ckpt")
    report, summary, metrics = (_out(c, tmp_path, n) for c, n in
                                ((HTML, "report"), (Markdown, "summary"), (Metrics, "metrics")))  # fmt: skip
    status = dsl.PipelineTaskFinalStatus(state="FAILED", pipeline_job_resource_name="j", pipeline_task_name="t",
                                         error_code=1, error_message="eval failed")  # fmt: skip
    # night "": the night this run started, found by its run id
    nightly_report_step("{}", [], prefix, "", RUN, "ckpt", ["mlvu"], status, report, summary, metrics)
    out = tmp_path / "results" / "2026-11-30" / "report"
    assert report.metadata["uri"] == str(out)
    assert Path(report.path).read_bytes() == (out / "report.html").read_bytes()
    assert Path(summary.path).read_bytes() == (out / "report.md").read_bytes()
    night = json.loads((tmp_path / "results" / "nights" / "2026-11-30.json").read_text())
    assert (night["state"], night["error"], night["checkpoint"]) == ("FAILED", "eval failed", "ckpt")
    assert night["benchmarks"]["mlvu"]["state"] == "FAILED"


def test_report_step_reads_sft_and_rl_under_the_run_prefix_and_writes_its_report_there(
    tmp_path: Path,
) -> None:
    from components.launchers.report import report_step

    prefix = tmp_path / "runs" / "r1"
    _mark(prefix / "sft", "sft", {"metrics.json": b'{"steps": 3}'})
    _mark(prefix / "rl", "rl", {"metrics.json": b'{"steps": 2}'})
    report, summary, metrics = (_out(c, tmp_path, n) for c, n in
                                ((HTML, "report"), (Markdown, "summary"), (Metrics, "metrics")))  # fmt: skip
    html = report_step("{}", [], [], report, summary, metrics, run_prefix=str(prefix), run_id=RUN)
    assert html == report.metadata["uri"] == f"{prefix}/report/report.html"
    assert Path(report.path).read_bytes() == (prefix / "report" / "report.html").read_bytes()
    assert Path(summary.path).read_bytes() == (prefix / "report" / "report.md").read_bytes()
    assert metrics.metadata == {"sft.steps": 3.0, "rl.steps": 2.0}


# -- the ablation steps: the study's variant, the run's root, the eval arguments, the report ------------------

STUDY = yaml.safe_dump({"benchmarks": ["mlvu"], "variants": [
    {"name": "base", "rl": False, "eval_overrides": ["agent.max_turns=1"]},
    {"name": "no-tool", "rl_overrides": ["steps=1"]},
]})  # fmt: skip


def test_ablation_rl_step_of_a_variant_without_rl_exposes_the_sft_checkpoint(tmp_path: Path) -> None:
    from components.launchers.ablations import ablation_rl_step

    prefix = tmp_path / "runs" / "r1"
    curves, metrics, trained = (
        _out(Artifact, tmp_path, "curves"),
        _out(Metrics, tmp_path, "m"),
        _out(Model, tmp_path, "t"),
    )
    got = ablation_rl_step(
        STUDY, "base", "{}", [], "2", curves, metrics, trained, run_prefix=str(prefix), run_id=RUN
    )
    assert got == trained.metadata["uri"] == f"{prefix}/sft/final" and trained.metadata["gpus"] == "2"
    assert Path(curves.path).read_text() == "base: no RL (evaluates the SFT checkpoint)\n"


def test_ablation_eval_args_step_works_out_the_variants_model_prefix_and_overrides(tmp_path: Path) -> None:
    from components.launchers.ablations import ablation_eval_args_step

    info = _out(Artifact, tmp_path, "info")
    args = ablation_eval_args_step(STUDY, "no-tool::mlvu", ["seed=1"], info, run_id=RUN)
    root = _root(tmp_path)  # no run_prefix: the run's directory cut off the artifact's URI
    want = {"model": f"{root}/ablations/no-tool/rl/final", "output_prefix": f"{root}/ablations/no-tool/eval",
            "overrides": ["seed=1"], "benchmark": "mlvu"}  # fmt: skip
    assert args._asdict() == want
    assert json.loads(Path(info.path).read_text()) == {"variant": "no-tool", **want}
    prefix = tmp_path / "runs" / "r1"
    args = ablation_eval_args_step(STUDY, "base::mlvu", [], info, run_prefix=f"{prefix}/", run_id=RUN)
    assert (args.model, args.output_prefix, args.overrides) == (
        f"{prefix}/sft/final", f"{prefix}/ablations/base/eval", ["agent.max_turns=1"],
    )  # fmt: skip


def test_ablation_report_step_writes_the_study_report_under_the_run_prefix(tmp_path: Path) -> None:
    from components.launchers.ablations import ablation_report_step

    prefix = tmp_path / "runs" / "r1"
    report, summary, metrics = (_out(c, tmp_path, n) for c, n in
                                ((HTML, "report"), (Markdown, "summary"), (Metrics, "metrics")))  # fmt: skip
    html = ablation_report_step(STUDY, ["base", "no-tool"], [], report, summary, metrics,
                                run_prefix=str(prefix), run_id=RUN)  # fmt: skip
    out = prefix / "ablations" / "report"
    assert html == report.metadata["uri"] == f"{out}/report.html"
    assert Path(report.path).read_bytes() == (out / "report.html").read_bytes()
    assert Path(summary.path).read_bytes() == (out / "report.md").read_bytes()
    assert metrics.metadata == json.loads((out / "metrics.json").read_text())
