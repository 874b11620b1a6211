"""Running a real training step on fake tensors: the fake process group and the dispatch mode that keeps the
step's *index* computations real.

``FakeTensorMode`` gives every tensor a shape, a dtype and a device but no data, so the 8B model and its
activations cost nothing. A training step also computes small integer tensors from its inputs and reads
them back in Python (``nonzero`` of the trained positions, ``grid_thw.tolist()`` in the vision tower, the
block-diagonal mask found from where position ids restart, ``float(loss)`` for the logs). Under plain
``FakeTensorMode`` those raise ``DataDependentOutputException``. :class:`RealIndices` sits above the fake
mode and runs an op for real when none of its tensor inputs is fake (the inputs' token ids, positions and
targets are real tensors, so everything computed only from them stays real: those are the same few KB they
are on a GPU and the memory tracker counts them like any other tensor); integer factories and
``arange`` / ``linspace`` are real too. Floating-point factories (parameters, activations, optimizer
states) stay fake. Reading a number out of a fake tensor (``.item()``) returns 0: only logging and
statistics read them, never anything that decides a shape. A fake tensor indexed with a real boolean mask
is indexed with the mask's real positions instead (the same selection).

DTensor works out an op's output shape by running the op on placeholders of the *global* (unsharded) shapes
in a fake mode (``ShardingPropagator._propagate_tensor_meta_non_cached``): on a real run that is a fresh
``FakeTensorMode`` of its own, which ``FSDPMemTracker`` recognises and skips (torch 2.14.1,
``fsdp2_mem_tracker.py``: it only counts ops whose active fake mode is the one it was entered under). Under
this module's fake mode DTensor finds *ours* (``detect_fake_mode``) and the tracker counts its placeholders:
the first ``clip_grad_norm_`` of a run (``_foreach_norm`` over every DTensor gradient) then showed a whole
unsharded float32 copy of the gradients as "Activation" (0.78 GiB per 8B decoder layer). ``fake_world`` runs
that propagation with no modes active, so it gets its own fake mode, as on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten
_REAL_FLOAT_FACTORIES = {
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.linspace.default,
}


class RealIndices(TorchDispatchMode):
    """Above a ``FakeTensorMode``: ops on real tensors only (and integer factories) run for real."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        fakes = [t for t in tensors if isinstance(t, FakeTensor)]
        if func is aten._local_scalar_dense.default and fakes:
            dtype = fakes[0].dtype
            return False if dtype == torch.bool else 0.0 if dtype.is_floating_point else 0
        if fakes and func in _INDEXING:
            args = (args[0], _long_indices(args[1]), *args[2:])
        real = not fakes and torch.Tag.nondeterministic_seeded not in func.tags
        if real and (tensors or _index_factory(func, args, kwargs)):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


_INDEXING = {
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
}


def _long_indices(indices: Any) -> list[Any]:
    """A fake tensor indexed with a real boolean mask: the mask's positions as real integer indices (the same
    selection; the fake kernel cannot count a mask's true entries, the real one can)."""
    out: list[Any] = []
    for index in indices:
        if (
            isinstance(index, torch.Tensor)
            and not isinstance(index, FakeTensor)
            and index.dtype == torch.bool
        ):
            with unset_fake_temporarily():
                out.extend(torch.nonzero(index, as_tuple=True))
        else:
            out.append(index)
    return out


def _index_factory(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """A factory of integer / boolean values (or ``arange`` / ``linspace``): index computations."""
    if func in _REAL_FLOAT_FACTORIES:
        return True
    dtype = kwargs.get("dtype")
    if dtype is None and func is aten.full.default:  # torch.full(size, 7): the fill value decides
        return isinstance(args[1], (bool, int))
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex


@contextlib.contextmanager
def own_mode_for_sharding_propagation() -> Iterator[None]:
    """DTensor's output-shape propagation in a fake mode of its own (see the module docstring): the same
    function, called with the dispatch modes (ours, the memory tracker) set aside for its duration."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def propagate(self: Any, op_schema: Any) -> Any:
        with _disable_current_modes():
            return original(self, op_schema)

    ShardingPropagator._propagate_tensor_meta_non_cached = propagate  # type: ignore[method-assign]
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original  # type: ignore[method-assign]


@contextlib.contextmanager
def fake_world(world: int) -> Iterator[FakeTensorMode]:
    """Rank 0 of a fake process group of ``world`` ranks (collectives are no-ops that keep shapes: PyTorch's
    ``fake`` backend), with fake tensors and real index computations active."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("paravt plan needs its own (fake) process group; one is already initialized")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    gather_object = dist.all_gather_object

    def fake_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
        # What the fake backend's all_gather_object returns (every rank gets rank 0's object), without its
        # pickling: the objects here hold fake tensors, which neither pickle nor fit a byte storage.
        object_list[:] = [obj] * len(object_list)

    dist.all_gather_object = fake_gather_object
    try:
        with (
            own_mode_for_sharding_propagation(),
            FakeTensorMode(allow_non_fake_inputs=True) as mode,
            RealIndices(),
        ):
            yield mode
    finally:
        dist.all_gather_object = gather_object
        dist.destroy_process_group()
