"""``HostReads`` (train/syncs.py), the counter the one-read-per-step tests (``test_sft_step_host.py``,
``test_rl_step_host.py``) rely on: each listed read counted once at the line that made it, ``.item()`` included
(without it a new ``.item()`` sync in the step passed them), nothing else counted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.support.paths import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
SELF = str(Path(__file__).resolve().relative_to(ROOT))


def _reads(call) -> dict[str, int]:
    from paravt_core.train.syncs import HostReads

    with HostReads(roots=[HERE]) as reads:
        call()
    return dict(reads.sites)


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.item(),
        lambda t: t.tolist(),
        lambda t: float(t),
        lambda t: int(t),
        lambda t: bool(t),
        lambda t: t.numpy(),
        lambda t: t.cpu(),
        lambda t: torch.nonzero(t),
        lambda t: [0, 1][t],  # __index__
    ],
    ids=["item", "tolist", "float", "int", "bool", "numpy", "cpu", "nonzero", "index"],
)
def test_host_reads_count_each_read_once_at_its_line(read):
    """The one-read-per-step tests count with ``HostReads``: a new ``.item()`` in the step must show there."""
    t = torch.tensor(1)
    ((site, count),) = _reads(lambda: read(t)).items()
    assert count == 1
    path, _, line = site.rpartition(":")
    assert path == SELF and int(line) > 0


def test_host_reads_leave_out_other_roots_non_reads_and_the_optimizers_step_counter():
    from paravt_core.train.syncs import HostReads

    t = torch.tensor([1.0, 2.0])
    assert _reads(lambda: (t + 1, t.to("cpu"), t.sum())) == {}
    with HostReads(roots=[os.path.join(HERE, "fixtures")]) as reads:  # a read made outside the roots
        t.sum().item()
    assert reads.total == 0
    with HostReads() as reads:  # default roots: the package; this file is outside it
        t.sum().item()
    assert reads.total == 0 and reads.sites == {}
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([w], lr=0.1)
    w.grad = torch.ones(2)
    opt.step()  # the first step makes the state
    w.grad = torch.ones(2)
    assert _reads(opt.step) == {}  # ``_get_value(step)`` in torch/optim: a host counter, not a device sync
    two = _reads(lambda: (t[0].item(), t[1].item()))
    assert sum(two.values()) == 2 and len(two) == 1  # one line, two reads


def test_a_read_inside_torch_is_counted_at_the_first_caller_outside_it():
    """``clip_grad_norm_(error_if_nonfinite=True)`` tests its norm with a ``bool`` inside torch/nn/utils: the
    read is the caller's (this line), made through torch's own code; without the check there is none."""
    w = torch.nn.Parameter(torch.ones(2))
    w.grad = torch.ones(2)
    sites = _reads(lambda: torch.nn.utils.clip_grad_norm_([w], 1.0, error_if_nonfinite=True))
    ((site, count),) = sites.items()
    assert count == 1 and site.startswith(f"{SELF}:")
    assert _reads(lambda: torch.nn.utils.clip_grad_norm_([w], 1.0)) == {}


def test_sites_are_named_from_the_repository_root_wherever_the_process_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = torch.tensor(2.0)
    ((site, _),) = _reads(lambda: t.item()).items()
    assert site.startswith(f"{SELF}:")


def test_calls_under_the_counter_keep_their_keyword_arguments():
    from paravt_core.train.syncs import HostReads

    t = torch.tensor([[0.0, 3.0], [5.0, 0.0]])
    with HostReads(roots=[HERE]) as reads:
        rows, cols = torch.nonzero(t, as_tuple=True)
        summed = t.sum(dim=0, keepdim=True)
    assert rows.tolist() == [0, 1] and cols.tolist() == [1, 0]
    assert summed.tolist() == [[5.0, 3.0]]
    assert reads.total == 1  # the nonzero
