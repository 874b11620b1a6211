"""Our compiled pipelines checked against the rules of the KFP backend and Argo that will run them.

No cluster here: each test states the backend rule it checks, with the source file and the version it
was read from (KFP 2.17.0, whose go.mod pins github.com/argoproj/argo-workflows/v4 v4.0.5), and checks
the compiled IR (kfp 2.17.0's own compiler) against that rule.
"""

from __future__ import annotations

import re

import pytest
import yaml

from pipelines import platform
from pipelines.compile import compile_pipeline

PLACEHOLDER = re.compile(r"^\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}$")


@pytest.fixture(scope="module", params=["train", "nightly"])
def compiled(request, tmp_path_factory) -> tuple[str, dict, dict]:
    out = tmp_path_factory.mktemp("ir") / f"{request.param}.yaml"
    compile_pipeline(request.param, str(out))
    spec, platform_spec = yaml.safe_load_all(out.read_text())
    return request.param, spec, platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def _tasks_running(spec: dict, executor: str) -> list[tuple[list[str], dict]]:
    """(path of enclosing DAG component names, root first; task spec) of every task whose component
    runs ``executor``."""
    components = spec["components"]
    comp_of_exec = {name for name, c in components.items() if c.get("executorLabel") == executor}
    found = []

    def walk(dag: dict, path: list[str]) -> None:
        for task in dag["tasks"].values():
            ref = task["componentRef"]["name"]
            if ref in comp_of_exec:
                found.append((path, task))
            elif "dag" in components.get(ref, {}):
                walk(components[ref]["dag"], [*path, ref])

    walk(spec["root"]["dag"], ["root"])
    return found


def _source_types(spec: dict, path: list[str], task: dict, name: str) -> list[tuple[str, dict]]:
    """Follow task input ``name`` up through the enclosing DAGs to the pipeline's own parameter:
    [(where, inputDefinition)] from the innermost DAG to the root."""
    chain = []
    binding = task["inputs"]["parameters"][name]
    for depth in range(len(path) - 1, -1, -1):
        owner = spec["root"] if path[depth] == "root" else spec["components"][path[depth]]
        assert "componentInputParameter" in binding, (name, binding)
        key = binding["componentInputParameter"]
        definition = owner["inputDefinitions"]["parameters"][key]
        chain.append((f"{path[depth]}:{key}", definition))
        if depth == 0:
            break
        # The DAG component is itself a task in its parent: continue with that task's binding.
        parent = spec["root"] if path[depth - 1] == "root" else spec["components"][path[depth - 1]]
        parent_task = next(
            t for t in parent["dag"]["tasks"].values() if t["componentRef"]["name"] == path[depth]
        )
        binding = parent_task["inputs"]["parameters"][key]
    return chain


def test_gpu_counts_reach_the_driver_as_strings(compiled) -> None:
    """KFP 2.17.0 backend/src/v2/driver/driver.go (initPodSpecPatch): the accelerator limit is set only
    when ``resourceCount`` resolves to a non-empty string that parses as a Kubernetes quantity;
    backend/src/v2/driver/resolve.go (resolvePodSpecInputRuntimeParameter) resolves a
    ``{{$.inputs.parameters['X']}}`` placeholder with ``val.GetStringValue()``, which is "" for a
    number value. So X must be a STRING parameter all the way from the pipeline's own inputs (or the
    count a literal of digits)."""
    name, spec, _ = compiled
    gpu_execs = {
        e: c["container"]["resources"]["accelerator"]
        for e, c in spec["deploymentSpec"]["executors"].items()
        if "accelerator" in c["container"].get("resources", {})
    }
    assert set(gpu_execs) == (
        {"exec-sft-op", "exec-rl-op", "exec-eval-op"} if name == "train" else {"exec-eval-op"}
    )
    for executor, accel in gpu_execs.items():
        assert accel["resourceType"] == platform.GPU_RESOURCE
        count = accel["resourceCount"]
        match = PLACEHOLDER.match(count)
        if match is None:
            assert re.fullmatch(r"\d+", count), (executor, count)
            continue
        tasks = _tasks_running(spec, executor)
        assert tasks, executor
        for path, task in tasks:
            chain = _source_types(spec, path, task, match.group(1))
            assert chain[-1][0].startswith("root:"), chain
            for where, definition in chain:
                assert definition["parameterType"] == "STRING", (executor, where, definition)
            default = chain[-1][1].get("defaultValue")
            if default is not None:  # a default the driver can parse as a quantity
                assert isinstance(default, str) and re.fullmatch(r"\d+", default), (executor, default)


def _seconds(duration: str) -> int:
    assert duration.endswith("s"), duration
    return int(duration[:-1])


def _all_tasks(spec: dict) -> list[tuple[str, dict]]:
    dags = [("root", spec["root"]["dag"])] + [
        (n, c["dag"]) for n, c in spec["components"].items() if "dag" in c
    ]
    return [(f"{owner}/{name}", t) for owner, dag in dags for name, t in dag["tasks"].items()]


def test_retry_window_holds_every_attempt_at_its_per_attempt_limit(compiled) -> None:
    """Argo v4.0.5 workflow/controller/operator.go (processNodeRetries): ``backoff.maxDuration`` runs
    from the first attempt's start; past it no retry starts ("Max duration limit exceeded"), a backoff
    that would end past it is not waited for, and every retry's pod gets that instant as its deadline
    (workflowpod.go, getDeadline). The wait before retry n (0-based) is duration * factor^n, the factor
    read as an integer (util/intstr/parametrizable.go; KFP 2.17.0's Argo compiler,
    backend/src/v2/compiler/argocompiler/container.go, passes it with %v, so 2.0 reads as "2").
    Rule checked: maxDuration >= (retries + 1) * activeDeadlineSeconds + the waits, so a stage that
    fails late in any attempt is still retried and a retry is never cut short by the window."""
    _, spec, k8s = compiled
    retried = [(name, t) for name, t in _all_tasks(spec) if "retryPolicy" in t]
    assert retried
    for name, task in retried:
        policy = task["retryPolicy"]
        executor = spec["components"][task["componentRef"]["name"]]["executorLabel"]
        per_attempt = int(k8s[executor]["activeDeadlineSeconds"])
        factor = policy["backoffFactor"]
        assert float(factor).is_integer(), (name, factor)
        retries, base = policy["maxRetryCount"], _seconds(policy["backoffDuration"])
        waits = sum(base * int(factor) ** n for n in range(retries))
        assert _seconds(policy["backoffMaxDuration"]) >= (retries + 1) * per_attempt + waits, (name, policy)


def test_long_stages_retry_windows_by_hand() -> None:
    # SFT: 4 attempts of 48 h + waits of 60, 120, 240 s; RL: 4 x 72 h + the same waits.
    assert platform.retry_window_seconds(3, 48 * 3600) == 4 * 172800 + 420 == 691620
    assert platform.retry_window_seconds(3, 72 * 3600) == 4 * 259200 + 420 == 1037220


# The placeholders KFP 2.17.0's driver resolves in a task's constant inputs: exactly these strings,
# matched whole (backend/src/v2/driver/resolve.go, resolveInputParameter, `switch valStr`), plus
# {{$.workspace_path}} inside a string. Anything else (e.g. {{$.pipeline_root}}, which kfp.local
# resolves but the backend does not, or a run id inside a longer string) reaches the component as is.
DRIVER_PLACEHOLDERS = {
    "{{$.pipeline_job_name}}",
    "{{$.pipeline_job_resource_name}}",
    "{{$.pipeline_job_uuid}}",
    "{{$.pipeline_task_name}}",
    "{{$.pipeline_task_uuid}}",
    "{{$.pipeline_job_create_time_utc}}",
    "{{$.pipeline_job_schedule_time_utc}}",
}


def _constants(spec: dict) -> list[tuple[str, str, str]]:
    out = []
    for owner, task in _all_tasks(spec):
        for name, binding in task.get("inputs", {}).get("parameters", {}).items():
            value = binding.get("runtimeValue", {}).get("constant")
            if isinstance(value, str):
                out.append((owner, name, value))
    return out


def test_run_placeholders_are_ones_the_driver_resolves(compiled) -> None:
    name, spec, _ = compiled
    seen = set()
    for owner, param, value in _constants(spec):
        for found in re.findall(r"\{\{\$\.pipeline_[a-z_]+\}\}", value):
            assert value == found and found in DRIVER_PLACEHOLDERS, (owner, param, value)
            seen.add(found)
    assert seen == {"{{$.pipeline_job_uuid}}"}


def test_no_default_points_inside_a_pod(compiled) -> None:
    """Stage outputs must outlive the pod that wrote them: no pipeline parameter default and no
    constant input names a relative or pod-local path (the run's root comes from run_prefix or the
    pipeline root, components/locations.py)."""
    _, spec, _ = compiled
    defaults = [
        (k, v.get("defaultValue"))
        for k, v in spec["root"]["inputDefinitions"]["parameters"].items()
        if isinstance(v.get("defaultValue"), str)
    ]
    values = defaults + [(f"{o}:{p}", v) for o, p, v in _constants(spec)]
    for key, value in values:
        assert not value.startswith(("./", "../", "/tmp", "~")), (key, value)
        assert "paravt-work" not in value, (key, value)
