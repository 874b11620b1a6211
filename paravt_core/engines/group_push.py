"""The two moments of a weight push over a process group that every server engine shares (SGLang's
``/init_weights_update_group`` + ``/update_weights_from_distributed``, vLLM's ``/init_weight_transfer_engine`` +
``/update_weights``): the server's call returns only once the trainer side has done its part, so both run at
once, and a refusal or a failed side must end the wait instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from .base import EngineError

T = TypeVar("T")


async def join_group(
    server_call: Awaitable[T],
    trainer_join: Callable[[], Any] | None,
    *,
    group_name: str,
    where: str,
    timeout_s: float,
) -> T:
    """Await ``server_call`` (the server joining the group) while ``trainer_join`` (the trainer's join as rank
    0) runs in a thread; both must finish within ``timeout_s``, or ``EngineError`` says which side did not
    (``where``: the rendezvous address, for the message). Give ``trainer_join`` its own timeout too: a thread
    cannot be cancelled."""
    server = asyncio.ensure_future(server_call)
    sides: dict[str, asyncio.Future] = {"server": server}
    if trainer_join is not None:
        sides["trainer"] = asyncio.ensure_future(asyncio.to_thread(trainer_join))
    done, pending = await asyncio.wait(sides.values(), timeout=timeout_s, return_when=asyncio.FIRST_EXCEPTION)
    failed = next((t for t in done if t.exception() is not None), None)
    if failed is not None or pending:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if failed is not None:
            side = next(k for k, t in sides.items() if t is failed)
            err = failed.exception()
            raise EngineError(f"weight-update group {group_name}: the {side} side failed ({err})") from err
        waiting = ", ".join(k for k, t in sides.items() if t in pending)
        raise EngineError(
            f"weight-update group {group_name}: rendezvous at {where} not complete after {timeout_s:g} s "
            f"(still waiting: {waiting})"
        )
    return server.result()


def _settle(future: asyncio.Future, err: BaseException | None) -> None:
    if not future.done():
        future.set_exception(err) if err is not None else future.set_result(None)


async def send_bucket(
    server_call: Awaitable[T],
    named_tensors: Sequence[tuple[str, Any]],
    broadcast: Callable[[Any], Any] | None,
) -> T:
    """Await ``server_call`` (the server receiving one announced bucket) while ``broadcast(tensor)`` sends each
    of the bucket's tensors in order from a thread. A refusal that comes before the broadcasts finish raises at
    once (the server will not receive them); a failed broadcast raises its error."""
    task = asyncio.ensure_future(server_call)
    if broadcast is None:
        return await task
    loop = asyncio.get_running_loop()
    sending: asyncio.Future = loop.create_future()
    tensors = [t for _, t in reversed(named_tensors)]

    def settle(err: BaseException | None) -> None:
        # after a refusal the call returned and its loop may be closed: nobody waits for the outcome
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, sending, err)

    def send_all() -> None:
        try:
            while tensors:  # each one let go once sent: the thread may outlive the request a moment
                broadcast(tensors.pop())
        except BaseException as err:  # handed to the awaiting coroutine
            settle(err)
        else:
            settle(None)

    # a daemon thread, not asyncio.to_thread: after a refusal the broadcast blocks until the group's timeout,
    # and the loop's executor would make asyncio.run wait for it
    threading.Thread(target=send_all, name="paravt-weight-broadcast", daemon=True).start()
    done, _ = await asyncio.wait({task, sending}, return_when=asyncio.FIRST_COMPLETED)
    if task in done and task.exception() is not None and not sending.done():
        # the broadcast thread stays blocked until the group's timeout: nothing can cancel it
        raise task.exception()  # type: ignore[misc]
    try:
        await sending
    except BaseException:
        task.cancel()  # the announced bucket will not arrive whole: stop waiting for the server's answer
        await asyncio.gather(task, return_exceptions=True)
        raise
    return await task
