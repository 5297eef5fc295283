"""Drives the runner of an asynchronous stream on the running loop: waits, collects, replays."""

from __future__ import annotations

import asyncio

from .fetching import BatchNotSent
from .runner import Runner

__all__ = ["AsyncDriver"]


class AsyncDriver:
    """Keeps an asynchronous runner moving while the producer is idle.

    One task on the running loop waits for tasks to finish, submits what is
    pending and replays what reached the head; producers wait on
    :meth:`room` when the bound is reached. An error raised downstream
    while replaying (a node's ``"raise"`` policy) is kept and raised to the
    next producer call.
    """

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        #: The loop it runs on, where the stream's timers send their ticks.
        self.loop = asyncio.get_running_loop()
        self.task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()
        self.error: BaseException | None = None

    def kick(self) -> None:
        """Make sure the driving task runs."""
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._drive())

    def check(self) -> None:
        """Raise the error the driving task met, once."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    async def _drive(self) -> None:
        runner = self.runner
        try:
            while runner.head() is not None:
                await self.await_any()
                runner.pump()
                await self.runner.replay.run_async()
                self.changed.set()
        except BaseException as e:
            self.error = e
        finally:
            self.changed.set()

    async def room(self) -> None:
        """Wait until the producer may go on (room in flight, or an error)."""
        runner = self.runner
        while runner.full() and self.error is None:
            self.changed.clear()
            self.kick()
            await self.changed.wait()
        self.check()

    async def finish(self) -> list[BaseException]:
        """End of stream: submit the rest, wait for all of it, replay it.

        Returns the errors raised downstream meanwhile, in order.
        """
        runner = self.runner
        errors: list[BaseException] = []
        if self.task is not None:
            await self.task
        if self.error is not None:
            errors.append(self.error)
            self.error = None
        errors.extend(runner.submit_close())
        while runner.head() is not None:
            try:
                await self.await_one()
            except BatchNotSent as e:  # a stateful round that waited (see Runner._start_second)
                errors.append(e)
            await self.runner.replay.run_async(errors)
        await self.runner.replay.run_async(errors)
        return errors

    async def await_one(self) -> None:
        """Wait until the head result is in, then collect what is done."""
        runner = self.runner
        while not runner.head_ready():
            await self._fetch()
        runner.poll()

    async def await_any(self) -> None:
        """Wait until some task is done, then collect what is done."""
        runner = self.runner
        if not runner.head_ready():
            await self._fetch()
        runner.poll()

    async def _fetch(self) -> None:
        """Wait for the next finished task, and keep its result."""
        runner = self.runner
        if runner.failed is not None:  # a stateful stage's chain is cut: nothing comes
            raise runner.failed
        future, result = await anext(runner.fetcher)
        runner.store(future, result)
