"""A rollout fleet of vLLM servers, routed by this client: vLLM 0.32 ships no router, and sglang-router's
workers are SGLang servers (it registers them through SGLang's own routes).

- **Generation**: each request goes to one server (a ``VllmEngine`` member). The requests of one GRPO group
  (``GenerationRequest.routing_key``) stay on the server their key was first sent to, chosen as the one with the
  fewest keys that have requests in flight, so a group shares one prefix cache (its system prompt, frames and
  question) and groups spread evenly; a request without a key goes to the server with the fewest requests in
  flight. A key is remembered while any request of it is in flight and for the ``KEYS_KEPT`` most recent keys
  after (a group's next turn comes back to its server).
- **Weights**: the disk push on every server at once (``VllmEngine``'s: paused, reloaded, caches reset,
  versioned, resumed). ``check_versions`` reads each server's ``/weight_info`` and refuses when one lags
  (``DiskSync.verify`` first pushes the current directory to a lagging server once more). The push over a
  process group is not offered for a fleet: one group would have to span every server's workers.
- **Servers**: launched by the stage (``engine.servers``: one per ``engine.port + i``, ``engine.gpus`` split
  evenly) or running ones (``engine.worker_urls``).
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

import httpx

from .base import Completion, Engine, EngineError, GenerationRequest
from .fleet import FleetVersionError, repush_to
from .vllm_engine import VllmEngine, VllmServer, served_model

KEYS_KEPT = 4096


class ServerGroup:
    """The fleet's server processes as one (``engines.base.ServerProcess``): started side by side."""

    label = "vLLM fleet"

    def __init__(self, servers: Sequence[VllmServer], *, timeout_s: float = 900.0):
        self.servers, self.timeout_s = list(servers), timeout_s
        self.base_url = ",".join(s.base_url for s in self.servers)

    def start(self) -> ServerGroup:
        for server in self.servers:
            server.spawn()
        try:
            for server in self.servers:
                server.wait_healthy(timeout_s=self.timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        for server in self.servers:
            server.stop(timeout_s)


class VllmFleet(Engine):
    name = "vllm-fleet"
    server_label = "vLLM fleet"
    token_level = False

    def __init__(self, members: Sequence[VllmEngine]):
        if not members:
            raise ValueError("a fleet needs at least one server")
        self.members = list(members)
        self.processor = self.members[0].processor
        self.base_url = ",".join(m.base_url for m in self.members)
        self.server: ServerGroup | None = None  # set by launch(): the processes this engine owns
        self.weight_version: str | None = None
        self.assignments: OrderedDict[str, int] = OrderedDict()  # routing key -> member
        self._key_flight: Counter[str] = Counter()
        self._flight = [0] * len(self.members)

    @classmethod
    def launch(
        cls, plans: Sequence[tuple[list[str], dict[str, str], str]], *, log_paths: Sequence[str | None],
        start_timeout_s: float = 900.0, **kwargs: Any,
    ) -> VllmFleet:  # fmt: skip
        """Start every ``(command, env, base_url)`` of ``plans`` side by side, wait until all are healthy,
        and connect to them; ``fleet.server.stop()`` ends them all."""
        servers = [
            VllmServer(command, base_url, env=env, log_path=log)
            for (command, env, base_url), log in zip(plans, log_paths, strict=True)
        ]
        group = ServerGroup(servers, timeout_s=start_timeout_s).start()
        try:
            fleet = cls([VllmEngine(s.base_url, served_model(s.base_url), **kwargs) for s in servers])
        except BaseException:
            group.stop()
            raise
        fleet.server = group
        for member, server in zip(fleet.members, servers, strict=True):
            member.server = server
        return fleet

    # -- routing ----------------------------------------------------------------------------------------
    def _pick(self, key: str | None) -> int:
        if key is None:
            return min(range(len(self.members)), key=lambda i: self._flight[i])
        if key in self.assignments:
            self.assignments.move_to_end(key)
            return self.assignments[key]
        active = Counter(
            self.assignments[k] for k, n in self._key_flight.items() if n and k in self.assignments
        )
        chosen = min(range(len(self.members)), key=lambda i: (active[i], self._flight[i]))
        self.assignments[key] = chosen
        while len(self.assignments) > KEYS_KEPT:  # forget the oldest key with nothing in flight
            old = next((k for k in self.assignments if not self._key_flight[k]), None)
            if old is None:
                break
            del self.assignments[old]
        return chosen

    async def _one(self, request: GenerationRequest) -> Completion:
        key = request.routing_key
        i = self._pick(key)
        self._flight[i] += 1
        if key is not None:
            self._key_flight[key] += 1
        try:
            (completion,) = await self.members[i].generate([request])
            return completion
        finally:
            self._flight[i] -= 1
            if key is not None:
                self._key_flight[key] -= 1
                if not self._key_flight[key]:
                    del self._key_flight[key]

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    # what the stages count on a chat engine: the members' sums
    @property
    def prompt_ids_checked(self) -> int:
        return sum(m.prompt_ids_checked for m in self.members)

    @property
    def prompt_id_mismatches(self) -> int:
        return sum(m.prompt_id_mismatches for m in self.members)

    @property
    def prompt_token_mismatches(self) -> int:
        return sum(m.prompt_token_mismatches for m in self.members)

    # -- weights ----------------------------------------------------------------------------------------
    async def _each(self, call: str, *args: Any, **kwargs: Any) -> None:
        results = await asyncio.gather(
            *(getattr(m, call)(*args, **kwargs) for m in self.members), return_exceptions=True
        )
        errors = [
            (m.root, r) for m, r in zip(self.members, results, strict=True) if isinstance(r, BaseException)
        ]
        if errors:
            raise EngineError(
                f"{call} failed on {len(errors)} of {len(self.members)} vLLM server(s): "
                + "; ".join(f"{url}: {err}" for url, err in errors)
            )

    async def pause_generation(self, mode: str = "wait") -> None:
        await self._each("pause_generation", mode)

    async def continue_generation(self) -> None:
        await self._each("continue_generation")

    async def update_weights_from_disk(self, model_path: str, *, weight_version: str | None = None) -> None:
        await self._each("update_weights_from_disk", model_path, weight_version=weight_version)
        self.weight_version = weight_version

    def _member(self, url: str) -> VllmEngine:
        for member in self.members:
            if url in (member.root, member.base_url):
                return member
        raise EngineError(f"{url} is not a server of this fleet")

    async def repush(self, urls: Sequence[str], model_path: str, *, weight_version: str) -> None:
        """The weights in ``model_path`` to ``urls`` only (servers found lagging); a failure raises."""
        await repush_to({u: self._member(u) for u in urls}, model_path, weight_version=weight_version)

    async def served_versions(self) -> dict[str, str | None]:
        """Each server's ``/weight_info`` ``weight_version`` (None: it did not answer)."""

        async def one(member: VllmEngine) -> str | None:
            client, _ = member._bind()
            try:
                response = await client.get(member.root + "/weight_info", timeout=30.0)
                response.raise_for_status()
                version = response.json().get("weight_version")
            except (httpx.HTTPError, ValueError):
                return None
            return None if version is None else str(version)

        versions = await asyncio.gather(*(one(m) for m in self.members))
        return {m.root: v for m, v in zip(self.members, versions, strict=True)}

    async def check_versions(self, expected: str) -> dict[str, str | None]:
        """Every server serves ``expected``; else ``FleetVersionError`` naming the ones that lag."""
        served = await self.served_versions()
        if any(v != expected for v in served.values()):
            raise FleetVersionError(expected, served)
        return served

    async def aclose(self) -> None:
        for member in self.members:
            await member.aclose()
