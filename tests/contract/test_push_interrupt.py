"""A weight push cut short mid-bucket, against SGLang 0.5.23's own weight updater (the
loopback receiver of ``tests/support/sglang_support.py``, gloo in place of NCCL). The sync marks itself failed and
refuses to push again; ``close()`` returns without destroying either side's group (NCCL would wait on the
stuck transfer); ``recover`` restarts a server the stage owns and pushes again in full, or, for an external
server, ends with one line naming what to restart. The last test does it all after a learner *process* is
killed mid-bucket, the served weights checked by SGLang's own checksum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from paravt_core.engines.sglang_engine import SGLangEngine
from paravt_core.models import load
from paravt_core.rl.weight_sync import NcclSync, PushFailed, recover
from tests.support.ports import free_port
from tests.support.push_support import _OwnedServer
from tests.support.sglang_support import SGLangReceiver, kill_mid_bucket, sglang_site

STOP_AT = 40  # the tensor the push is cut before (a later bucket: session open, generation paused)


def _sync(url: str, port: int) -> NcclSync:
    engine = SGLangEngine(url, timeout_s=120, control_timeout_s=5)
    return NcclSync(engine, master_address="127.0.0.1", master_port=port, server_ranks=1, backend="gloo",
                    bucket_bytes=64 * 1024, timeout_s=20)  # fmt: skip


def _cut(sync: NcclSync) -> None:
    send, sent = sync._broadcast, [0]

    def broadcast(tensor: torch.Tensor) -> None:
        sent[0] += 1
        if sent[0] == STOP_AT:
            raise RuntimeError("learner interrupted mid-bucket")
        send(tensor)

    sync._broadcast = broadcast


def test_an_interrupted_push_fails_the_sync_and_close_does_not_wait(receiver, tiny_model_dir: str) -> None:
    weights = {k: v.detach() + 0.5 for k, v in load(tiny_model_dir).model.state_dict().items()}
    sync = _sync(receiver.url, free_port())
    _cut(sync)
    with pytest.raises(
        PushFailed, match=r"^NCCL weight push of version 1 failed: RuntimeError: learner interrupted"
    ):
        sync.push(weights, 1)
    assert sync.failed is not None and sync.version == 0
    with pytest.raises(PushFailed, match=r"an earlier push failed .*; restart the server$"):
        sync.push(weights, 1)  # never again into a server that may be stuck on the cut transfer
    sync.close()
    assert sync.group is None
    assert not [e for e in receiver.log() if e.get("path") == "/destroy_weights_update_group"]
    # an external server (engine.base_url): one line naming what to restart
    with pytest.raises(PushFailed) as why:
        recover(sync, weights, 1, PushFailed("NCCL weight push of version 1 failed"))
    assert str(why.value) == (
        f"NCCL weight push of version 1 failed. Restart the SGLang server at {receiver.url} (an interrupted "
        "weight push leaves it unable to take another), then rerun this stage: it resumes from its last checkpoint"
    )


def test_recover_restarts_the_owned_server_and_pushes_in_full(
    receiver, tiny_model_dir: str, tmp_path
) -> None:
    weights = {k: v.detach() + 0.5 for k, v in load(tiny_model_dir).model.state_dict().items()}
    sync = _sync(receiver.url, free_port())
    sync.engine.server = server = _OwnedServer(sync.engine, receiver, tmp_path / "restarted")
    sync.static = {n for n in weights if n.startswith("model.visual.")}  # sent by a first push only
    _cut(sync)
    with pytest.raises(PushFailed) as cut:
        sync.push(weights, 1)
    fresh, said = recover(sync, weights, 1, cut.value)
    try:
        assert server.starts == 1 and fresh is not sync and fresh.group_name != sync.group_name
        assert said.endswith("; restarted the SGLang server this stage owns and pushed version 1 to it")
        received = server.receiver.snapshot()
        assert list(received) == list(weights)  # in full: the new server has the tower too
        assert all(torch.equal(received[k], weights[k]) for k in weights)
        assert fresh.version == 1 and fresh.failed is None
    finally:
        fresh.close()
        server.receiver.kill()


def test_a_failed_push_names_what_cut_it_not_only_the_cleanup_after_it() -> None:
    from paravt_core.engines.base import EngineError
    from paravt_core.rl.weight_sync import _cause

    try:
        try:
            raise RuntimeError("learner interrupted mid-bucket")
        finally:
            raise EngineError("/end_weight_update: timed out after 120 s")
    except EngineError as err:
        assert _cause(err) == (
            "RuntimeError: learner interrupted mid-bucket (then EngineError: /end_weight_update: timed out after 120 s)"
        )
    assert _cause(RuntimeError("x")) == "RuntimeError: x"


def test_a_renewed_sync_keeps_the_settings_under_a_new_group() -> None:
    """``recover``'s sync for the restarted server: every setting and the tower's names kept, a group name of
    its own (SGLang keeps the old one), nothing joined, failed or pushed (its first push is in full)."""
    sync = NcclSync(SGLangEngine("http://127.0.0.1:9"), master_address="10.0.0.5", master_port=29600,
                    server_ranks=2, version=7, backend="gloo", bucket_bytes=1234, pause_mode="abort",
                    timeout_s=9.0, dtype=torch.bfloat16)  # fmt: skip
    sync.static = {"model.visual.x"}
    sync.failed, sync._pushed, sync.group, sync.pushed_buckets = "cut", True, object(), [["w"]]
    fresh = sync.renewed()
    settings = ["engine", "master_address", "master_port", "server_ranks", "version", "backend", "bucket_bytes",
                "pause_mode", "timeout_s", "dtype", "static"]  # fmt: skip
    assert [getattr(fresh, k) for k in settings] == [getattr(sync, k) for k in settings]
    assert (fresh.version, fresh.bucket_bytes, fresh.dtype) == (7, 1234, torch.bfloat16)
    assert fresh.group_name != sync.group_name and fresh.group_name.startswith("paravt-")
    assert (fresh.failed, fresh._pushed, fresh.group, fresh.pushed_buckets) == (None, False, None, [])


def _stage_run(sync: NcclSync, learner: Any) -> Any:
    """The RL stage's pushes (``rl.push.WeightPush``) on one rank, over ``sync`` (NCCL push: bucket streams)."""
    from paravt_core.rl.push import WeightPush
    from paravt_core.train.dist import Dist

    return WeightPush(Dist(), learner, sync, torch.bfloat16, streams=True)


@pytest.mark.parametrize("owned", [True, False], ids=["owned_server", "external_server"])
def test_a_learner_process_killed_mid_bucket_is_followed_by_the_new_learners_weights(
    tiny_model_dir: str, tmp_path: Path, sglang_checker, owned: bool
) -> None:
    """Item 4's last sentence. A learner process (``nccl_push_victim.py``: our ``NcclSync`` bucketed push over
    a real gloo group into SGLang's weight updater) is SIGKILLed with a bucket half sent. The server is the
    receiver in ``--wedge`` mode: the cut receive holds it for good, as a server on NCCL is held (on gloo alone
    the receive fails and the server goes on: ``test_a_learner_killed_mid_push_is_followed_by_one_that_pushes``).
    The new learner's stage starts with its push of version 0 (``WeightPush.push``), which fails on the held server;
    then the stage's recovery: a server it owns is restarted and pushed in full; an external one ends the stage
    with one line naming the server, which is restarted there and the rerun's start push goes through. Either
    way the server then holds exactly the new learner's weights: ``/weights_checker``'s checksum (SGLang's
    ``WeightChecker``) equals the one SGLang's code makes of the learner's weights (bf16, the served dtype)."""
    from paravt_core.rl.config import RlConfig
    from paravt_core.rl.learner import Learner
    from scripts.gpu_check import checksum_of

    port = free_port()
    stuck = SGLangReceiver(sglang_site(), _mkdir(tmp_path / "first"), wedge=True)
    servers = [stuck]
    syncs: list[NcclSync] = []
    try:
        cut = kill_mid_bucket(stuck.url, port, tiny_model_dir)
        assert cut["bucket"] > 0 and 0 < cut["sent"] < cut["of"]
        cfg = RlConfig()
        learner = Learner(load(tiny_model_dir).model, load(tiny_model_dir).model, temperature=cfg.agent.temperature,
                          advantage=cfg.advantage, loss=cfg.loss, optim=cfg.optim)  # fmt: skip
        sync = _sync(stuck.url, port)  # the same rendezvous address and port as the killed learner's
        sync.dtype, sync.static = torch.bfloat16, learner.frozen_names()
        syncs.append(sync)
        run = _stage_run(sync, learner)
        if owned:
            sync.engine.server = server = _OwnedServer(sync.engine, stuck, tmp_path / "restarted")
            run.push(0)  # the start push fails on the held server; the stage restarts it and pushes again
            servers.append(server.receiver)
            assert server.starts == 1 and run.sync is not sync and run.pushed_full
        else:
            with pytest.raises(PushFailed) as why:
                run.push(0)
            line = str(why.value)
            assert line.startswith("NCCL weight push of version 0 failed: ") and "\n" not in line
            assert line.endswith(
                f". Restart the SGLang server at {stuck.url} (an interrupted weight push leaves it unable to "
                "take another), then rerun this stage: it resumes from its last checkpoint"
            )
            stuck.kill()  # what the line asks: that server restarted, at the same address, and the stage rerun
            restarted = SGLangReceiver(
                sglang_site(), _mkdir(tmp_path / "restarted"), port=_port_of(stuck.url)
            )
            servers.append(restarted)
            rerun = _stage_run(_sync(restarted.url, port), learner)
            rerun.sync.dtype, rerun.sync.static = torch.bfloat16, learner.frozen_names()
            rerun.push(0)
            run = rerun
        syncs.append(run.sync)
        assert run.sync.version == 0 and run.sync.failed is None
        want = learner.weights(torch.bfloat16)
        torch.save(want, tmp_path / "want.pt")
        killed = {
            k: (v.detach() + 0.5).bfloat16() for k, v in load(tiny_model_dir).model.state_dict().items()
        }
        torch.save(killed, tmp_path / "killed.pt")
        served = checksum_of(servers[-1].weights_checker())
        assert served == checksum_of(sglang_checker.weights_checksum(tmp_path / "want.pt"))
        assert served != checksum_of(sglang_checker.weights_checksum(tmp_path / "killed.pt"))  # it can tell
    finally:
        for s in syncs:
            s.close()
        for r in servers:
            r.kill()


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])
