"""Cluster settings every stage task gets: resources, retries with backoff, S3 secret, caching, timeout.

Kept in one place so the train DAG and the nightly eval pipeline configure tasks the same way.
"""

from __future__ import annotations

from kfp import dsl, kubernetes

S3_SECRET_NAME = "paravt-s3"
# Env var -> key in the Kubernetes Secret (manifests/ holds the template). Values never enter the IR.
S3_SECRET_KEYS = {
    "AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY",
    "AWS_ENDPOINT_URL": "AWS_ENDPOINT_URL",
}


def configure_task(
    task: dsl.PipelineTask,
    *,
    display_name: str,
    cpu: str = "2",
    memory: str = "8G",
    gpus: int = 0,
    accelerator: str = "nvidia.com/gpu",
    retries: int = 3,
    timeout_seconds: int = 24 * 3600,
    cache: bool = False,
) -> dsl.PipelineTask:
    """Apply the shared cluster settings to one stage task and return it."""
    task.set_display_name(display_name)
    task.set_cpu_request(cpu).set_cpu_limit(cpu)
    task.set_memory_request(memory).set_memory_limit(memory)
    if gpus:
        task.set_accelerator_type(accelerator).set_accelerator_limit(gpus)
        kubernetes.add_toleration(task, key=accelerator, operator="Exists", effect="NoSchedule")
    # Stages are resumable, so a retry continues where the failed attempt stopped.
    task.set_retry(
        num_retries=retries, backoff_duration="60s", backoff_factor=2.0, backoff_max_duration="3600s"
    )
    # Stages write to object storage: a cache hit would skip those side effects.
    task.set_caching_options(cache)
    kubernetes.use_secret_as_env(task, secret_name=S3_SECRET_NAME, secret_key_to_env=S3_SECRET_KEYS)
    kubernetes.set_timeout(task, timeout_seconds)
    return task
