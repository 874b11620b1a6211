"""``paravt pipeline submit|schedule|retry|status`` against a real HTTP server speaking KFP v2beta1.

The server (tests/support/kfp_test_server.py) records every request; the assertions check the request bodies
kfp.Client sends (parameters, cron, max_concurrency, no_catchup, mode), the bearer token in the
header and nowhere in our output, and the one-line errors.
"""

from __future__ import annotations

import re

import pytest
import yaml

from paravt_core.cli import main
from tests.support.kfp_test_server import API, KfpTestServer, required_permission
from tests.support.ports import free_port

TOKEN = "tok-3f9a-not-for-printing"
# A train package that submit accepts: compiled with the recipes (a plain one's "{}" RL config is the CPU demo,
# refused before anything is sent: test_pipeline_config_check.py)
RECIPES = ["--sft-config", "configs/sft/qwen3vl_8b.yaml", "--rl-config", "configs/rl/paragrpo_8b.yaml"]


@pytest.fixture
def kfp_server(monkeypatch):
    monkeypatch.setenv("KFP_TOKEN", TOKEN)
    with KfpTestServer(token=TOKEN) as server:
        yield server


def _conn(server: KfpTestServer, namespace: str = "team-a") -> list[str]:
    return ["--host", server.url, "--namespace", namespace]


def _params_file(tmp_path, params: dict) -> str:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return str(path)


def _no_token_printed(capsys) -> tuple[str, str]:
    out, err = capsys.readouterr()
    assert TOKEN not in out and TOKEN not in err
    return out, err


def test_submit_creates_experiment_and_run(kfp_server, tmp_path, capsys) -> None:
    params = {
        "data_config_yaml": "output: s3://bucket/runs/7/data\n",
        "data_overrides": ["extract.workers=1"],
    }
    argv = ["pipeline", "submit", "train", "--experiment", "paravt-exp", "--run-name", "run-7"]
    argv += ["--params", _params_file(tmp_path, params), "--pipeline-root", "s3://bucket/kfp"]
    assert main(argv + _conn(kfp_server)) == 0
    out, _ = _no_token_printed(capsys)

    state = kfp_server.state
    # Every call authenticated with the token from $KFP_TOKEN.
    assert state.requests and all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in state.requests)
    # Experiment looked up by name first, then created because it did not exist.
    (lookup,) = state.calls("GET", "/experiments")
    assert '"stringValue": "paravt-exp"' in lookup.query["filter"][0]
    (created,) = state.calls("POST", "/experiments")
    assert created.body == {"display_name": "paravt-exp", "namespace": "team-a"}
    experiment_id = next(iter(state.experiments))

    (run_call,) = state.calls("POST", "/runs")
    body = run_call.body
    assert body["experiment_id"] == experiment_id
    assert body["display_name"] == "run-7"
    assert body["runtime_config"] == {"parameters": params, "pipeline_root": "s3://bucket/kfp"}
    # The compiled train pipeline travels with its Kubernetes platform config (the S3 secret by name).
    assert body["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "paravt-train"
    k8s = body["pipeline_spec"]["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert k8s["exec-data-op"]["secretAsEnv"][0]["secretName"] == "paravt-s3"

    run_id = next(iter(state.runs))
    assert out == f"{kfp_server.url}/#/runs/details/{run_id}\n"


def test_submit_compiled_file_default_namespace_checks_health(kfp_server, tmp_path, capsys) -> None:
    package = tmp_path / "train.yaml"
    assert main(["pipeline", "compile", "train", str(package), *RECIPES]) == 0
    capsys.readouterr()
    argv = ["pipeline", "submit", str(package), "--host", kfp_server.url, "--ui-host", "https://ui.example"]
    assert main(argv) == 0
    out, _ = _no_token_printed(capsys)
    # With the default namespace the client asks the server whether it is multi-user first.
    assert kfp_server.state.requests[0].path == "/apis/v2beta1/healthz"
    (run_call,) = kfp_server.state.calls("POST", "/runs")
    assert run_call.body["display_name"] == str(package).removesuffix(".yaml")
    assert run_call.body["runtime_config"] == {"parameters": {}}
    assert out == f"https://ui.example/#/runs/details/{next(iter(kfp_server.state.runs))}\n"


def test_submit_rejects_unknown_parameter_before_any_run(kfp_server, tmp_path, capsys) -> None:
    argv = ["pipeline", "submit", "train", "--params", _params_file(tmp_path, {"data_confg_yaml": "{}"})]
    assert main(argv + _conn(kfp_server)) == 2  # a usage mistake
    _, err = _no_token_printed(capsys)
    assert "unknown pipeline parameter(s) data_confg_yaml" in err and "data_config_yaml" in err
    assert kfp_server.state.calls("POST", "/runs") == []


def test_wrong_token_is_one_line_error_without_the_token(kfp_server, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OTHER_TOKEN", "wrong-token-77")
    argv = ["pipeline", "status", "some-run", "--token-env", "OTHER_TOKEN"] + _conn(kfp_server)
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert err == "paravt pipeline: KFP API error 401 Unauthorized: unauthenticated\n"
    assert "wrong-token-77" not in out + err
    assert kfp_server.state.requests[-1].headers["authorization"] == "Bearer wrong-token-77"


def test_schedule_create_enable_disable(kfp_server, tmp_path, capsys) -> None:
    params = {"data_overrides": ["extract.workers=2"]}
    argv = ["pipeline", "schedule", "create", "train", "--name", "nightly", "--experiment", "paravt-nightly"]
    argv += ["--cron", "0 30 2 * * *", "--params", _params_file(tmp_path, params)]
    assert main(argv + _conn(kfp_server)) == 0
    out, _ = _no_token_printed(capsys)
    state = kfp_server.state
    (job_call,) = state.calls("POST", "/recurringruns")
    body = job_call.body
    assert body["display_name"] == "nightly"
    assert body["experiment_id"] == next(iter(state.experiments))
    assert body["trigger"] == {"cron_schedule": {"cron": "0 30 2 * * *"}}
    assert body["max_concurrency"] == 1
    assert body["no_catchup"] is True
    assert body["mode"] == "ENABLE"
    assert body["runtime_config"] == {"parameters": params}
    assert body["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "paravt-train"
    job_id = next(iter(state.recurring_runs))
    assert out == f"{kfp_server.url}/#/recurringrun/details/{job_id}\n"

    assert main(["pipeline", "schedule", "disable", job_id] + _conn(kfp_server)) == 0
    assert state.requests[-1].method == "POST"
    assert state.requests[-1].path == f"/apis/v2beta1/recurringruns/{job_id}:disable"
    assert state.recurring_runs[job_id]["mode"] == "DISABLE"
    assert main(["pipeline", "schedule", "enable", job_id] + _conn(kfp_server)) == 0
    assert state.requests[-1].path == f"/apis/v2beta1/recurringruns/{job_id}:enable"
    assert state.recurring_runs[job_id]["mode"] == "ENABLE"

    # Same name again in the same experiment: refused, nothing created.
    assert main(argv + _conn(kfp_server)) == 1
    _, err = _no_token_printed(capsys)
    assert f"already exists in experiment 'paravt-nightly' (id {job_id})" in err
    assert len(state.recurring_runs) == 1

    # With --exist-ok (the manifests' scheduler job) the existing one is the answer.
    assert main(argv + ["--exist-ok"] + _conn(kfp_server)) == 0
    out, _ = _no_token_printed(capsys)
    assert out == f"{kfp_server.url}/#/recurringrun/details/{job_id}\n"
    assert len(state.recurring_runs) == 1 and len(state.calls("POST", "/recurringruns")) == 1


def test_schedule_created_disabled(kfp_server, capsys) -> None:
    argv = ["pipeline", "schedule", "create", "train", "--name", "paused", "--disabled"] + _conn(kfp_server)
    assert main(argv) == 0
    (job_call,) = kfp_server.state.calls("POST", "/recurringruns")
    assert job_call.body["mode"] == "DISABLE"
    assert job_call.body["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}  # the default


def test_schedule_rejects_five_field_cron(kfp_server, capsys) -> None:
    argv = ["pipeline", "schedule", "create", "train", "--name", "n", "--cron", "0 2 * * *"]
    assert main(argv + _conn(kfp_server)) == 2  # a usage mistake
    _, err = capsys.readouterr()
    assert "has 5 fields; KFP needs 6, seconds first" in err
    assert kfp_server.state.requests == []  # refused before talking to the server


def _seed_run(server: KfpTestServer, run_id: str, state: str, tasks: list[tuple[str, str]]) -> None:
    server.state.runs[run_id] = {
        "run_id": run_id,
        "display_name": "train-42",
        "state": state,
        "error": {"code": 2, "message": "task rl failed"} if state == "FAILED" else None,
        "run_details": {
            "task_details": [
                {"display_name": name, "state": task_state, "task_id": f"t{i}"}
                for i, (name, task_state) in enumerate(tasks)
            ]
        },
    }


def test_retry_failed_run(kfp_server, capsys) -> None:
    _seed_run(kfp_server, "run-f", "FAILED", [("data", "SUCCEEDED"), ("sft", "SUCCEEDED"), ("rl", "FAILED")])
    assert main(["pipeline", "retry", "run-f"] + _conn(kfp_server)) == 0
    out, _ = _no_token_printed(capsys)
    assert [(r.method, r.path) for r in kfp_server.state.requests] == [
        ("GET", "/apis/v2beta1/runs/run-f"),
        ("POST", "/apis/v2beta1/runs/run-f:retry"),
    ]
    assert kfp_server.state.runs["run-f"]["state"] == "RUNNING"
    assert out == f"{kfp_server.url}/#/runs/details/run-f\n"


def test_retry_refuses_succeeded_run(kfp_server, capsys) -> None:
    _seed_run(kfp_server, "run-ok", "SUCCEEDED", [("data", "SUCCEEDED")])
    assert main(["pipeline", "retry", "run-ok"] + _conn(kfp_server)) == 1
    _, err = capsys.readouterr()
    assert err == "paravt pipeline: run run-ok is SUCCEEDED; only a failed run can be retried\n"
    assert kfp_server.state.calls("POST") == []


def test_status_lists_tasks(kfp_server, capsys) -> None:
    _seed_run(kfp_server, "run-f", "FAILED", [("data", "SUCCEEDED"), ("rl", "FAILED")])
    assert main(["pipeline", "status", "run-f"] + _conn(kfp_server)) == 0
    out, _ = _no_token_printed(capsys)
    assert out.splitlines() == [
        "run run-f (train-42): FAILED",
        f"  {kfp_server.url}/#/runs/details/run-f",
        "  error: task rl failed",
        "  SUCCEEDED  data",
        "  FAILED     rl",
    ]


def test_status_unknown_run(kfp_server, capsys) -> None:
    assert main(["pipeline", "status", "nope"] + _conn(kfp_server)) == 1
    _, err = capsys.readouterr()
    assert err == "paravt pipeline: KFP API error 404 Not Found: run nope not found\n"


def test_unreachable_host(monkeypatch, capsys) -> None:
    port = free_port()  # a port nobody listens on
    assert main(["pipeline", "status", "r", "--host", f"http://127.0.0.1:{port}", "--namespace", "x"]) == 1
    _, err = capsys.readouterr()
    assert err.startswith("paravt pipeline: cannot reach the KFP API")


@pytest.mark.parametrize("verb", ["create", "submit"])
def test_kfp_cli_run_create_and_deprecated_submit(kfp_server, tmp_path, verb) -> None:
    """The README's `kfp run create` line works against the same server; `submit` is an alias that warns."""
    from click.testing import CliRunner
    from kfp.cli.cli import cli

    package = tmp_path / "train.yaml"
    assert main(["pipeline", "compile", "train", str(package)]) == 0
    argv = ["--endpoint", kfp_server.url, "--namespace", "team-a", "--existing-token", TOKEN, "run", verb]
    argv += ["--experiment-name", "paravt", "--run-name", "cli-run", "--package-file", str(package)]
    argv += ['data_overrides=["extract.workers=4"]']
    result = CliRunner().invoke(cli, argv, obj={})  # kfp.cli.__main__ passes obj={}
    (run_call,) = kfp_server.state.calls("POST", "/runs")
    assert run_call.body["display_name"] == "cli-run"
    assert run_call.body["runtime_config"]["parameters"] == {"data_overrides": ["extract.workers=4"]}
    deprecation = "Warning: 'submit' is deprecated, use 'create' instead."
    assert (deprecation in result.output) == (verb == "submit")


def test_submit_sends_gpu_counts_as_the_strings_the_driver_reads(kfp_server, tmp_path, capsys) -> None:
    # KFP 2.17.0 backend/src/v2/driver/resolve.go reads the accelerator count with GetStringValue():
    # a number in the params file (YAML `4`) must reach the API as "4", not as a number.
    params = {"sft_gpus": 4, "rl_gpus": "2"}
    argv = ["pipeline", "submit", "train", "--experiment", "e", "--params", _params_file(tmp_path, params)]
    assert main(argv + _conn(kfp_server)) == 0
    _no_token_printed(capsys)
    (run_call,) = kfp_server.state.calls("POST", "/runs")
    assert run_call.body["runtime_config"]["parameters"] == {"sft_gpus": "4", "rl_gpus": "2"}


def test_compile_warns_and_strict_submit_refuses_unpinned_images(kfp_server, tmp_path, capsys) -> None:
    package = tmp_path / "train.yaml"
    assert main(["pipeline", "compile", "train", str(package), *RECIPES]) == 0
    _, err = capsys.readouterr()
    # The default images are local tags: every one of them is named in the warning.
    assert "not pinned by digest" in err
    assert all(f"paravt-{f}:0.1.0" in err for f in ("sft", "rl", "eval"))

    argv = ["pipeline", "submit", str(package), "--experiment", "e", "--strict"]
    assert main(argv + _conn(kfp_server)) == 1
    _, err = _no_token_printed(capsys)
    assert "images not pinned by digest: paravt-eval:0.1.0, paravt-rl:0.1.0, paravt-sft:0.1.0" in err
    assert kfp_server.state.requests == []  # refused before anything was sent

    # The same package with every image by digest goes through.
    docs = list(yaml.safe_load_all(package.read_text()))
    for executor in docs[0]["deploymentSpec"]["executors"].values():
        name = executor["container"]["image"].split(":")[0]
        executor["container"]["image"] = f"registry.example/{name}@sha256:{'c' * 64}"
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump_all(docs))
    argv = ["pipeline", "submit", str(pinned), "--experiment", "e", "--strict"]
    assert main(argv + _conn(kfp_server)) == 0
    _no_token_printed(capsys)
    (run_call,) = kfp_server.state.calls("POST", "/runs")
    images = {
        e["container"]["image"]
        for e in run_call.body["pipeline_spec"]["pipeline_spec"]["deploymentSpec"]["executors"].values()
    }
    assert all("@sha256:" in i for i in images)


def test_strict_schedule_refuses_unpinned_images(kfp_server, tmp_path, capsys) -> None:
    argv = ["pipeline", "schedule", "create", "nightly", "--name", "n", "--strict"]
    assert main(argv + _conn(kfp_server)) == 1
    _, err = _no_token_printed(capsys)
    assert "not pinned by digest" in err and kfp_server.state.requests == []


def _role_grants(name: str, overlay: str = "prod") -> set[tuple[str, str]]:
    from tests.support.manifests_support import _grants, by_kind, render

    (role,) = [r for r in by_kind(render(overlay), "Role") if r["metadata"]["name"] == name]
    return _grants(role["rules"])


def test_scheduler_role_is_enough_for_the_scheduler_job_and_the_old_one_was_not(
    tmp_path, capsys, monkeypatch
) -> None:
    """The test server authorizes every call as multi-user KFP 2.17 does (tests/support/kfp_test_server.py,
    required_permission); the scheduler Job's command with the rendered paravt-scheduler Role's grants."""
    monkeypatch.setenv("KFP_TOKEN", TOKEN)
    params = _params_file(tmp_path, {"checkpoint_uri": "s3://m/x", "results_prefix": "s3://r/n"})
    argv = [
        "pipeline",
        "schedule",
        "create",
        "nightly",
        "--name",
        "nightly",
        "--params",
        params,
        "--sync",
    ]
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({"checkpoint_uri": "s3://m/y", "results_prefix": "s3://r/n"}))
    granted = _role_grants("paravt-scheduler")
    used: dict[str, set] = {}
    # KFP 2.17 (ORPHAN delete) and KFP 2.15.0 as Kubeflow 1.11 ships it (healthz tag_name "unknown": the
    # old recurring run is disabled, its runs listed, then deleted; job_server.go's Verb "disable",
    # run_server.go ListRuns' Verb "list" on runs).
    for tag in ("2.17.0", "unknown"):
        with KfpTestServer(token=TOKEN, grants=granted) as server:
            server.state.tag_name = tag
            assert main(argv + _conn(server)) == 0
            assert len(server.state.recurring_runs) == 1
            assert main(argv + _conn(server)) == 0  # the CronJob's next night: found by name, nothing created
            assert len(server.state.recurring_runs) == 1
            swapped = [a if a != params else str(changed) for a in argv]
            assert main(swapped + _conn(server)) == 0  # new parameters deployed: replaced
            assert len(server.state.recurring_runs) == 1 and len(server.state.calls("DELETE")) == 1
            used[tag] = {
                required_permission(r.method, r.path.removeprefix(API)) for r in server.state.requests
            }
    _no_token_printed(capsys)
    assert used["2.17.0"] - {None} == {("experiments", "list"), ("experiments", "create"),
                                       ("jobs", "list"), ("jobs", "create"), ("jobs", "delete")}  # fmt: skip
    # And nothing more: the Role grants exactly what the syncs were authorized for.
    assert (used["2.17.0"] | used["unknown"]) - {None} == granted == {
        ("experiments", "list"), ("experiments", "create"), ("jobs", "list"), ("jobs", "create"),
        ("jobs", "disable"), ("jobs", "delete"), ("runs", "list")}  # fmt: skip
    # The Role as it was (recurring runs as `recurringruns`): KFP refuses the list of recurring runs.
    old = {("experiments", v) for v in ("get", "list", "create")} | {
        ("recurringruns", v) for v in ("get", "list", "create")
    }
    with KfpTestServer(token=TOKEN, grants=old) as server:
        assert main(argv + _conn(server)) == 1
        assert server.state.recurring_runs == {}
    _, err = _no_token_printed(capsys)
    assert "403" in err and "jobs" in err


def test_operator_role_covers_submit_status_retry_and_schedule_toggles(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KFP_TOKEN", TOKEN)
    with KfpTestServer(token=TOKEN, grants=_role_grants("paravt-operator")) as server:
        assert main(["pipeline", "submit", "train", "--experiment", "e"] + _conn(server)) == 0
        (run_id,) = server.state.runs
        assert main(["pipeline", "status", run_id] + _conn(server)) == 0
        server.state.runs[run_id]["state"] = "FAILED"
        assert main(["pipeline", "retry", run_id] + _conn(server)) == 0
        params = _params_file(tmp_path, {"checkpoint_uri": "s3://m/x", "results_prefix": "s3://r/n"})
        argv = ["pipeline", "schedule", "create", "nightly", "--name", "n", "--params", params]
        assert main(argv + _conn(server)) == 0
        (job_id,) = server.state.recurring_runs
        for verb in ("disable", "enable"):
            assert main(["pipeline", "schedule", verb, job_id] + _conn(server)) == 0
        # The permissions these commands exercised (each granted, else a command above would have failed).
        from tests.support.kfp_test_server import API, required_permission

        used = {required_permission(r.method, r.path[len(API) :]) for r in server.state.requests} - {None}
        assert used == {
            ("experiments", "list"),
            ("experiments", "create"),
            ("runs", "create"),
            ("runs", "get"),
            ("runs", "retry"),
            ("jobs", "list"),
            ("jobs", "create"),
            ("jobs", "enable"),
            ("jobs", "disable"),
        }
    _no_token_printed(capsys)


def test_schedule_sync_follows_the_deployed_spec(kfp_server, capsys, tmp_path) -> None:
    """KFP 2.17.0 cannot change a recurring run (backend/api/v2beta1/recurring_run.proto: Create, Get,
    List, Enable, Disable, Delete; no Update), and ``--exist-ok`` kept the first one forever: its inline
    spec, image digests and parameters. ``--sync`` (the manifests' CronJob) keeps the recurring run only
    while it was made from the same package and settings, and otherwise creates the new one and then
    deletes the old (jobs delete: job_server.go, DeleteRecurringRun)."""
    from pipelines.compile import compile_pipeline

    first = compile_pipeline("nightly", str(tmp_path / "nightly.yaml"), warn=False)
    text = (tmp_path / "nightly.yaml").read_text()
    assert text.count("image: paravt-eval:") >= 1
    second = tmp_path / "nightly-new-image.yaml"  # the same pipeline, a new eval image digest
    second.write_text(
        re.sub(r"image: paravt-eval:\S+", "image: registry.example/paravt-eval@sha256:" + "1" * 64, text)
    )
    params = {"checkpoint_uri": "s3://m/latest", "results_prefix": "s3://r/nightly"}
    state = kfp_server.state

    def sync(package: str, p: dict, cron: str = "0 0 2 * * *") -> str:
        argv = ["pipeline", "schedule", "create", package, "--name", "nightly", "--experiment", "e"]
        argv += ["--cron", cron, "--params", _params_file(tmp_path, p), "--sync"]
        assert main(argv + _conn(kfp_server)) == 0
        out, _ = _no_token_printed(capsys)
        return out.strip().rsplit("/", 1)[-1]

    one = sync(first, params)
    assert list(state.recurring_runs) == [one]
    assert sync(first, params) == one  # nothing changed: kept, nothing created or deleted
    assert len(state.calls("POST", "/recurringruns")) == 1 and not state.calls(
        "DELETE", f"/recurringruns/{one}"
    )

    two = sync(str(second), params)  # new image: replaced
    assert two != one and list(state.recurring_runs) == [two]
    images = {e["container"]["image"] for e in state.recurring_runs[two]["pipeline_spec"]["pipeline_spec"][
        "deploymentSpec"]["executors"].values()}  # fmt: skip
    assert images == {"registry.example/paravt-eval@sha256:" + "1" * 64}

    three = sync(str(second), {**params, "checkpoint_uri": "s3://m/v2"})  # new parameters: replaced
    assert three not in (one, two) and list(state.recurring_runs) == [three]
    assert state.recurring_runs[three]["runtime_config"]["parameters"]["checkpoint_uri"] == "s3://m/v2"

    four = sync(str(second), {**params, "checkpoint_uri": "s3://m/v2"}, cron="0 0 3 * * *")  # new cron
    assert list(state.recurring_runs) == [four] and four != three
    assert len(state.calls("POST", "/recurringruns")) == 4


def test_schedule_sync_deletes_the_old_recurring_run_without_its_running_workflows(
    kfp_server, capsys, tmp_path
) -> None:
    """KFP 2.17.0's ScheduledWorkflow controller makes the recurring run its Workflows' owner
    (backend/src/crd/controller/scheduledworkflow/util/scheduled_workflow.go, SetOwnerReferences), so a
    plain delete lets the garbage collector stop a nightly in progress; DeleteRecurringRunRequest takes
    ``propagation_policy`` ORPHAN (backend/api/v2beta1/recurring_run.proto, DeletePropagationPolicy = 3),
    sent as a query parameter (grpc-gateway's mapping of a DELETE's fields)."""
    from pipelines.compile import compile_pipeline

    first = compile_pipeline("nightly", str(tmp_path / "nightly.yaml"), warn=False)
    argv = ["pipeline", "schedule", "create", first, "--name", "nightly", "--experiment", "e", "--sync"]
    for p in ({"checkpoint_uri": "s3://m/a"}, {"checkpoint_uri": "s3://m/b"}):
        params = {**p, "results_prefix": "s3://r/nightly"}
        assert main([*argv, "--params", _params_file(tmp_path, params), *_conn(kfp_server)]) == 0
    (delete,) = kfp_server.state.calls("DELETE")
    assert delete.query == {"propagation_policy": ["ORPHAN"]}
    assert len(kfp_server.state.recurring_runs) == 1


def _sync_nightly(kfp_server, tmp_path, package: str, checkpoint: str) -> None:
    params = {"checkpoint_uri": checkpoint, "results_prefix": "s3://r/nightly"}
    argv = ["pipeline", "schedule", "create", package, "--name", "nightly", "--experiment", "e", "--sync"]
    assert main([*argv, "--params", _params_file(tmp_path, params), *_conn(kfp_server)]) == 0


def test_schedule_sync_on_kfp_2_15_disables_the_old_recurring_run_while_its_nightly_runs(
    kfp_server, capsys, tmp_path
) -> None:
    """KFP 2.15.0 has no orphaning delete: backend/api/v2beta1/recurring_run.proto's
    DeleteRecurringRunRequest has only ``recurring_run_id`` (``propagation_policy`` came in 2.16.0), and
    its gateway handler (go_client/recurring_run.pb.gw.go, request_RecurringRunService_DeleteRecurringRun_0)
    reads only the path, so ``?propagation_policy=ORPHAN`` is dropped and the ScheduledWorkflow goes with
    ``DeleteOptions{}`` (resource_manager.go, DeleteJob): the garbage collector removes its Workflows. Its
    release images report healthz ``tag_name`` "unknown" (no TAG_NAME build arg before 2.16.0). So the old
    recurring run is disabled (no new run starts) and kept while a run of it is PENDING/RUNNING/CANCELING/
    PAUSED (run.proto, RuntimeState), then deleted by the next sync."""
    from pipelines.compile import compile_pipeline

    state = kfp_server.state
    state.tag_name = "unknown"
    package = compile_pipeline("nightly", str(tmp_path / "nightly.yaml"), warn=False)
    _sync_nightly(kfp_server, tmp_path, package, "s3://m/a")
    (one,) = state.recurring_runs
    nightly = state.scheduled_run(one, "RUNNING")
    capsys.readouterr()

    _sync_nightly(kfp_server, tmp_path, package, "s3://m/b")  # new parameters: a new recurring run
    two = next(j for j in state.recurring_runs if j != one)
    _, err = _no_token_printed(capsys)
    assert (
        state.recurring_runs[one]["status"] == "DISABLED" and state.recurring_runs[two]["status"] == "ENABLED"
    )
    assert not state.calls("DELETE") and state.deleted_workflows == []  # the nightly keeps its Workflow
    assert f"recurring run {one}: replaced by {two}, disabled but not deleted" in err
    assert f"{nightly} (RUNNING)" in err and "the next --sync deletes it" in err
    (listed,) = state.calls("GET", "/runs")
    assert listed.query["experiment_id"] == [state.recurring_runs[two]["experiment_id"]]
    assert '"stringValue": "' + one + '"' in listed.query["filter"][0]

    state.runs[nightly]["state"] = "SUCCEEDED"  # the nightly is over: the next sync deletes the old one
    _sync_nightly(kfp_server, tmp_path, package, "s3://m/b")
    assert list(state.recurring_runs) == [two]
    (delete,) = state.calls("DELETE")
    assert delete.path == f"{API}/recurringruns/{one}" and delete.query == {}  # 2.15 takes no policy
    assert len(state.calls("POST", f"/recurringruns/{one}:disable")) == 1  # not disabled twice
    assert f"recurring run {one}: replaced by {two}\n" in _no_token_printed(capsys)[1]


def test_schedule_sync_on_kfp_2_15_deletes_an_idle_old_recurring_run_after_disabling_it(
    kfp_server, capsys, tmp_path
) -> None:
    """No run of the old recurring run active (its last one FAILED, a final RuntimeState): disabled
    first, so no run can start between the check and the delete, then deleted in the same sync. Any tag
    below 2.16.0 is such a server."""
    from pipelines.compile import compile_pipeline

    state = kfp_server.state
    state.tag_name = "2.15.0"
    package = compile_pipeline("nightly", str(tmp_path / "nightly.yaml"), warn=False)
    _sync_nightly(kfp_server, tmp_path, package, "s3://m/a")
    (one,) = state.recurring_runs
    state.scheduled_run(one, "FAILED")
    _sync_nightly(kfp_server, tmp_path, package, "s3://m/b")
    (two,) = state.recurring_runs
    assert two != one
    order = [(r.method, r.path) for r in state.requests if r.path.startswith(f"{API}/recurringruns/{one}")]
    assert order == [("POST", f"{API}/recurringruns/{one}:disable"), ("DELETE", f"{API}/recurringruns/{one}")]
    assert state.calls("DELETE")[0].query == {}
    _no_token_printed(capsys)


def test_schedule_sync_on_kfp_2_16_orphans_without_disabling(kfp_server, capsys, tmp_path) -> None:
    """KFP 2.16.0 is the first release with DeleteRecurringRunRequest.propagation_policy and a real healthz
    ``tag_name`` (its images get the TAG_NAME build arg): one ORPHAN delete, no disable, no run listing,
    and the running nightly keeps its Workflow."""
    from pipelines.compile import compile_pipeline

    state = kfp_server.state
    state.tag_name = "2.16.0"
    package = compile_pipeline("nightly", str(tmp_path / "nightly.yaml"), warn=False)
    _sync_nightly(kfp_server, tmp_path, package, "s3://m/a")
    (one,) = state.recurring_runs
    state.scheduled_run(one, "RUNNING")
    _sync_nightly(kfp_server, tmp_path, package, "s3://m/b")
    assert one not in state.recurring_runs and len(state.recurring_runs) == 1
    (delete,) = state.calls("DELETE")
    assert delete.query == {"propagation_policy": ["ORPHAN"]}
    assert not state.calls("POST", ":disable") and not state.calls("GET", "/runs")
    assert state.deleted_workflows == []
    _no_token_printed(capsys)
