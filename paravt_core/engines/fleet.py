"""A rollout fleet: R SGLang servers behind one ``sglang-router`` (the SGLang Model Gateway, pinned 0.3.2).

- **Generation** goes to the router, one request per body (its ``/generate`` type holds one request: a batch's
  list of ``sampling_params`` is answered 422). The router picks a server per request:
  - ``manual`` policy (default) with ``--assignment-mode min_group``: every request carries its GRPO group's
    routing key in the ``x-smg-routing-key`` header; a new key goes to the server with the fewest keys that
    have requests in flight (measured: keys arriving one at a time on idle servers all land on the first), later
    requests with that key to the same server. So a group's episodes share one server's prefix cache (its
    system prompt, frames and question), and groups spread evenly over the servers.
  - ``cache_aware``: the router's own radix tree over the request text. With token-id prompts it matches on
    the ids written as text; images are one collapsed ``<|image_pad|>`` each in our ids, so two groups' prompts
    (same system prompt, same number of frames) look alike to it and pile onto one server until the load
    difference passes ``--balance-abs-threshold``. Kept for text-heavy prompts.
- **Failures**: the router retries a request on another server (``--retry-max-retries``; 5xx and connection
  errors), its circuit breaker stops sending to a dead server and its health checks drop it; what still fails
  comes back to ``SGLangEngine``'s own retries (new request ids) and then the episode's. Both sides count:
  the router's ``smg_worker_retries_total`` (read from its Prometheus endpoint) and our ``retried_posts``.
- **Weights** go from disk to every server the router knows (``/update_weights_from_disk`` on each, in
  parallel); the router does not forward weight updates. ``check_versions`` reads each server's
  ``/model_info`` ``weight_version`` (SGLang 0.5.23 ``entrypoints/http_server.py``) and refuses when one lags
  (``DiskSync.verify`` first pushes the current directory to a lagging server once more).
  The NCCL push is not offered for a fleet: one group would have to span every server's ranks.
- **Servers** are in-pod processes this program starts (``rl.launch``: ``--worker-urls``), or pods the router
  finds itself through Kubernetes (``--service-discovery --selector k=v``; the router's service account then
  needs get/list/watch on pods).
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Sequence
from typing import Any

import httpx

from .base import EngineError
from .sglang_engine import SGLangEngine

ROUTING_HEADER = "x-smg-routing-key"  # the manual policy's sticky key (sglang-router 0.3.2)
ROUTER_MODULE = "sglang_router.launch_router"
POLICIES = ("manual", "cache_aware", "round_robin", "power_of_two", "random")


class FleetVersionError(EngineError):
    """A server of the fleet serves another policy version than the learner pushed."""

    def __init__(self, expected: str, served: dict[str, str | None]):
        lagging = {u: v for u, v in served.items() if v != expected}
        super().__init__(
            f"{len(lagging)} of {len(served)} rollout server(s) do not serve policy version {expected}: "
            + ", ".join(f"{u} serves {v!r}" for u, v in sorted(lagging.items()))
        )
        self.expected, self.lagging = expected, lagging


async def repush_to(members: dict[str, Any], model_path: str, *, weight_version: str) -> None:
    """The weights in ``model_path`` to each server of ``members`` (URL -> its engine: the servers of a fleet
    found lagging) at once; any failure raises, naming each server that failed."""
    results = await asyncio.gather(
        *(m.update_weights_from_disk(model_path, weight_version=weight_version) for m in members.values()),
        return_exceptions=True,
    )
    errors = {u: r for u, r in zip(members, results, strict=True) if isinstance(r, BaseException)}
    if errors:
        raise EngineError(
            f"re-push of version {weight_version} failed on "
            + "; ".join(f"{u}: {e}" for u, e in errors.items())
        )


def router_command(
    worker_urls: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 30000,
    policy: str = "manual",
    max_retries: int = 3,
    health_interval_s: int = 5,
    metrics_port: int | None = None,
    selector: Sequence[str] = (),
    namespace: str = "",
    discovery_port: int = 30000,
    python: str = sys.executable,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``python -m sglang_router.launch_router ...`` (pure function). ``selector`` (``key=value`` labels): the
    router discovers the server pods itself (Kubernetes) instead of ``worker_urls``."""
    if policy not in POLICIES:
        raise ValueError(f"router policy {policy!r} is not one of {POLICIES}")
    if not worker_urls and not selector:
        raise ValueError("a router needs worker URLs or a service-discovery selector")
    cmd = [python, "-m", ROUTER_MODULE, "--host", host, "--port", str(port), "--policy", policy]
    if policy == "manual":  # a new routing key (a GRPO group) goes to the server with the fewest keys
        cmd += ["--assignment-mode", "min_group"]
    if selector:
        cmd += [
            "--service-discovery",
            "--selector",
            *selector,
            "--service-discovery-port",
            str(discovery_port),
        ]
        if namespace:
            cmd += ["--service-discovery-namespace", namespace]
    else:
        cmd += ["--worker-urls", *worker_urls]
    # router retries count attempts (1 = none); health checks drop a dead server within a few intervals
    cmd += [
        "--retry-max-retries",
        str(max_retries + 1),
        "--health-check-interval-secs",
        str(health_interval_s),
    ]
    if metrics_port is not None:
        cmd += ["--prometheus-host", host, "--prometheus-port", str(metrics_port)]
    return cmd + ["--log-level", "warn", *extra_args]


_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: (name, labels, value). Written here because it is ten lines
    and the router's labels are plain; ``prometheus_client`` would be a new dependency for this alone."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m and not line.startswith("#"):
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def router_counters(text: str) -> dict[str, Any]:
    """The router's counters we log per step: requests answered per server (circuit-breaker outcomes),
    failures per server, retries, requests that exhausted their retries."""
    ok: dict[str, float] = {}
    failed: dict[str, float] = {}
    retries = exhausted = 0.0
    for name, labels, value in parse_metrics(text):
        if name == "smg_worker_cb_outcomes_total":
            (ok if labels.get("outcome") == "success" else failed)[labels.get("worker", "")] = value
        elif name == "smg_worker_retries_total":
            retries += value
        elif name == "smg_worker_retries_exhausted_total":
            exhausted += value
    return {"served": ok, "failed": failed, "retries": retries, "retries_exhausted": exhausted}


def counter_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after - before`` for the numbers and per-server numbers of ``FleetEngine.counters`` (pure);
    other entries (``servers_down``, ``metrics_error``) as they are now."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, dict):
            old = old if isinstance(old, dict) else {}
            out[key] = {k: v - old.get(k, 0) for k, v in sorted(value.items())}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value - (old if isinstance(old, (int, float)) else 0)
        else:
            out[key] = value
    return out


class FleetEngine(SGLangEngine):
    """``SGLangEngine`` on a router: generation through it, control calls to every server behind it."""

    name = "sglang-fleet"

    def __init__(
        self,
        router_url: str,
        *,
        worker_urls: Sequence[str] = (),
        metrics_url: str = "",
        routing: bool = True,
        **kwargs: Any,
    ):
        """``worker_urls``: the servers (empty: the router's ``/workers`` list); ``metrics_url``: the router's
        Prometheus endpoint (empty: no router counters); ``routing``: send the groups' routing keys."""
        super().__init__(
            router_url,
            one_request_per_body=True,
            routing_header=ROUTING_HEADER if routing else None,
            **kwargs,
        )
        self.fixed_workers = [u.rstrip("/") for u in worker_urls]
        self.metrics_url = metrics_url
        self._members: dict[str, SGLangEngine] = {}
        self.servers_down: list[str] = []  # servers skipped by the last push (unreachable)

    async def worker_urls(self) -> list[str]:
        """The servers: the fixed list, or every worker the router has registered (healthy or not)."""
        if self.fixed_workers:
            return list(self.fixed_workers)
        try:
            response = await self._http().get(self.base_url + "/workers", timeout=30.0)
            response.raise_for_status()
            return [w["url"].rstrip("/") for w in response.json()["workers"]]
        except (httpx.HTTPError, KeyError, ValueError) as err:
            raise EngineError(f"{self.base_url}/workers: {err}") from err

    def member(self, url: str) -> SGLangEngine:
        """The plain engine of one server (its control calls are never retried, as ``SGLangEngine``'s)."""
        if url not in self._members:
            self._members[url] = SGLangEngine(url, processor=self.processor, timeout_s=self.timeout_s)
        return self._members[url]

    async def _each(self, call: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``call`` on every server at once; a server that fails and no longer answers ``/health`` is down
        (listed in ``servers_down``, skipped: the router stops sending it requests too), any other failure
        raises."""
        urls = await self.worker_urls()
        results = await asyncio.gather(
            *(getattr(self.member(u), call)(*args, **kwargs) for u in urls), return_exceptions=True
        )
        out: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        down: list[str] = []
        for url, result in zip(urls, results, strict=True):
            if not isinstance(result, BaseException):
                out[url] = result
            elif await self.member(url).health():
                errors[url] = result
            else:
                down.append(url)
        self.servers_down = down
        if errors:
            raise EngineError(
                f"{call} failed on {len(errors)} of {len(urls)} rollout server(s): "
                + "; ".join(f"{u}: {e}" for u, e in sorted(errors.items(), key=lambda x: x[0]))
            )
        if not out:
            raise EngineError(f"{call}: no rollout server answered ({len(down)} down)")
        return out

    async def update_weights_from_disk(
        self, model_path: str, *, load_format: str | None = None, weight_version: str | None = None
    ) -> dict[str, Any]:
        out = await self._each(
            "update_weights_from_disk", model_path, load_format=load_format, weight_version=weight_version
        )
        self.weight_version = weight_version
        return out

    async def repush(self, urls: Sequence[str], model_path: str, *, weight_version: str) -> None:
        """The weights in ``model_path`` to ``urls`` only (servers found lagging); a failure raises."""
        await repush_to({u: self.member(u) for u in urls}, model_path, weight_version=weight_version)

    async def pause_generation(self, mode: str = "retract") -> None:
        await self._each("pause_generation", mode)

    async def continue_generation(self) -> None:
        await self._each("continue_generation")

    async def flush_cache(self) -> None:
        await self._each("flush_cache")

    async def _no_distributed(self, *_: Any, **__: Any) -> Any:
        raise EngineError("a rollout fleet takes weight pushes from disk (engine.weight_sync=disk)")

    init_weights_update_group = update_weights_from_distributed = _no_distributed  # type: ignore[assignment]
    begin_weight_update = end_weight_update = _no_distributed  # type: ignore[assignment]

    async def served_versions(self, urls: Sequence[str] | None = None) -> dict[str, str | None]:
        """Each server's ``/model_info`` ``weight_version`` (None: it did not answer)."""

        async def one(url: str) -> str | None:
            try:
                response = await self._http().get(url + "/model_info", timeout=30.0)
                response.raise_for_status()
                version = response.json().get("weight_version")
                return None if version is None else str(version)
            except (httpx.HTTPError, ValueError):
                return None

        urls = list(urls) if urls is not None else await self.worker_urls()
        return dict(zip(urls, await asyncio.gather(*(one(u) for u in urls)), strict=True))

    async def check_versions(self, expected: str) -> dict[str, str | None]:
        """Every server that is not down serves ``expected``; else ``FleetVersionError``."""
        urls = [u for u in await self.worker_urls() if u not in self.servers_down]
        served = await self.served_versions(urls)
        if any(v != expected for v in served.values()):
            raise FleetVersionError(expected, served)
        return served

    async def counters(self) -> dict[str, Any]:
        """The router's counters (``router_counters``) plus ours; empty router part without ``metrics_url``."""
        out: dict[str, Any] = {"engine_retries": self.retried_posts, "servers_down": list(self.servers_down)}
        if self.metrics_url:
            try:
                response = await self._http().get(self.metrics_url, timeout=30.0)
                response.raise_for_status()
                out.update(router_counters(response.text))
            except httpx.HTTPError as err:
                out["metrics_error"] = str(err)
        return out

    async def aclose(self) -> None:
        for member in self._members.values():
            await member.aclose()
        await super().aclose()
