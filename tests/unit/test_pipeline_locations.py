"""components/locations.py: where a run's stages write by default, and which locations KFP's launcher
accepts as an output artifact's URI. The URIs below are written by hand in the layout KFP 2.17.0 gives
a task's outputs: ``<pipeline root>/<pipeline name>/<run id>/<task name>/<salt>/<output name>``
(backend/src/v2/driver/driver.go, provisionOutputs + metadata.GenerateOutputURI; the run's pipeline
root from backend/src/v2/metadata/client.go, GetPipeline)."""

from __future__ import annotations

import pytest
from kfp.dsl import Dataset, Model

from components.locations import expose, kfp_run_root, location, run_root

RUN = "7f3c2a10-5b1e-4c3d-9a8b-0e1f2a3b4c5d"
ROOT = f"s3://paravt-artifacts/kfp/paravt-train/{RUN}"
DATA_URI = f"{ROOT}/data-op/a1b2c3/dataset"


def test_default_is_the_runs_directory_under_the_pipeline_root() -> None:
    assert kfp_run_root(RUN, DATA_URI) == ROOT
    assert run_root("", RUN, DATA_URI) == ROOT
    # Every task of the run (and every retry, whatever its salt) gets the same root.
    assert run_root("", RUN, f"{ROOT}/sft-op/ffff/model") == ROOT


def test_an_explicit_prefix_wins() -> None:
    assert run_root("s3://other/runs/r7/", RUN, DATA_URI) == "s3://other/runs/r7"


def test_no_prefix_and_no_run_in_the_uri_is_an_error_not_a_pod_path() -> None:
    # kfp.local's layout has no run id in the URI: the user must give run_prefix.
    with pytest.raises(ValueError, match="set the pipeline's run_prefix"):
        run_root("", RUN, "/tmp/kfp-local/paravt-train-2026-11-25/data-op/dataset")
    with pytest.raises(ValueError):
        run_root("", "", DATA_URI)


def test_expose_sets_the_uri_only_under_the_runs_root() -> None:
    """KFP 2.17.0 backend/src/v2/component/launcher_v2.go (uploadOutputArtifacts): a URI the component
    set replaces KFP's (mergeRuntimeArtifacts); the launcher then needs Config.KeyFromURI(uri) to
    succeed for the run's pipeline root (backend/src/v2/objectstore/config.go: the URI must start with
    scheme + bucket + prefix, else the task fails), and skips the upload when nothing is at the local
    path (os.ErrNotExist is allowed): so a location under the run's root is shown without a copy."""
    dataset = Dataset(name="dataset", uri=DATA_URI)
    assert expose(dataset, f"{ROOT}/data", RUN) == "uri"
    assert dataset.uri == f"{ROOT}/data" and dataset.metadata["uri"] == f"{ROOT}/data"

    model = Model(name="model", uri=f"{ROOT}/sft-op/a1/model")
    elsewhere = "s3://other-bucket/runs/r7/sft/final"
    assert expose(model, elsewhere, RUN) == "metadata"  # KeyFromURI would fail: keep KFP's URI
    assert model.uri == f"{ROOT}/sft-op/a1/model" and model.metadata["uri"] == elsewhere
    # A sibling directory whose name merely starts with the run root is not under it.
    sibling = Model(name="model", uri=f"{ROOT}/sft-op/a1/model")
    assert expose(sibling, f"{ROOT}-old/sft/final", RUN) == "metadata"


def test_a_consumer_reads_the_directory_the_artifact_stands_for() -> None:
    """What SFT and RL read from their Dataset / Model inputs: the location ``expose`` recorded upstream
    (metadata survives into the consumer: KFP 2.17.0 backend/src/v2/metadata/converter.go toMLMDArtifact
    stores it as custom properties, driver/resolve.go hands them back), whether or not the URI itself
    could be set; an importer's artifact (no such metadata) stands for its URI."""
    under_root = Dataset(name="dataset", uri=DATA_URI)
    expose(under_root, f"{ROOT}/data", RUN)
    assert location(under_root) == f"{ROOT}/data"
    elsewhere = Model(name="model", uri=f"{ROOT}/sft-op/a1/model")
    expose(elsewhere, "s3://other-bucket/runs/r7/sft/final", RUN)
    assert location(elsewhere) == "s3://other-bucket/runs/r7/sft/final"  # not KFP's empty URI
    imported = Dataset(name="artifact", uri="s3://datasets/paravt/v3")
    assert location(imported) == "s3://datasets/paravt/v3"
