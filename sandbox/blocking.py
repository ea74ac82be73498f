"""``BlockingSandbox``: a ``Sandbox`` for synchronous code (e.g. the tool methods of TRL's ``environment_factory``).
Runs in: any Python >= 3.11, standard library only; a private event loop in a daemon thread of the caller's process.

Every method blocks until the sandbox call is done; ``close()`` (or leaving the ``with`` block) stops the sandbox
and the thread. How: docs/sandbox.md#inside-the-modules.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from sandbox.config import SandboxConfig
from sandbox.core import ExecResult, Sandbox
from sandbox.errors import SandboxError

T = TypeVar("T")


class BlockingSandbox:
    """``with BlockingSandbox(SandboxConfig(...)) as sb: sb.exec("ls").stdout`` (the methods of ``Sandbox``)."""

    def __init__(self, config: SandboxConfig | None = None, logger: logging.Logger | None = None):
        self.sandbox = Sandbox(config, logger)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"sandbox-{self.sandbox.config.name}",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def __enter__(self) -> BlockingSandbox:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def workdir(self) -> str:
        return self.sandbox.workdir

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise SandboxError("the sandbox is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:  # close() ended it: the sandbox is gone under this call
            raise SandboxError("the sandbox was closed while this call ran") from None
        except BaseException:
            # interrupted here (KeyboardInterrupt, ...): cancel the call, which kills its process group
            future.cancel()
            raise

    def start(self) -> None:
        self._call(self.sandbox.start())

    def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: float | None = None, user: str | int | None = None, until_exit: bool = False) -> ExecResult:
        return self._call(self.sandbox.exec(command, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user,
                                            until_exit=until_exit))

    def upload_file(self, source_path: Path | str, target_path: str) -> None:
        self._call(self.sandbox.upload_file(source_path, target_path))

    def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        self._call(self.sandbox.upload_dir(source_dir, target_dir))

    def download_file(self, source_path: str, target_path: Path | str) -> None:
        self._call(self.sandbox.download_file(source_path, target_path))

    def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        self._call(self.sandbox.download_dir(source_dir, target_dir))

    def root(self):
        """``Sandbox.root()``: the sandbox's root for the host to read beneath (sandbox/inside.py)."""
        return self.sandbox.root()

    def command_path(self, env: dict[str, str] | None = None) -> str:
        return self.sandbox.command_path(env)

    def command_sessions(self, since: int = 0) -> list[int]:
        return self.sandbox.command_sessions(since)

    def network_mark(self) -> int:
        return self._call(self._on_loop(self.sandbox.network_mark))

    def names_asked(self, since: int = 0, commands_only: bool = False, until: int | None = None) -> list[str]:
        return self._call(self._on_loop(self.sandbox.names_asked, since, commands_only, until))

    def asked_count(self, since: int = 0, commands_only: bool = False, until: int | None = None) -> int:
        return self._call(self._on_loop(self.sandbox.asked_count, since, commands_only, until))

    def queries(self, since: int = 0) -> list[dict]:
        return self._call(self._on_loop(self.sandbox.queries, since))

    @staticmethod
    async def _on_loop(fn, *args):  # the sandbox's state is the event-loop thread's
        return fn(*args)

    def stop(self) -> None:
        """Stop the sandbox: every process of it dies (``close`` also ends the thread)."""
        self._call(self.sandbox.stop())

    def close(self) -> None:
        """Stop the sandbox and end the event-loop thread. Idempotent."""
        if self._closed:
            return
        try:
            self._call(self.sandbox.stop())
        finally:
            self._closed = True
            try:  # calls of other threads still on the loop: theirs must end before it stops, or they wait forever
                asyncio.run_coroutine_threadsafe(_settle(), self._loop).result()
            except RuntimeError:  # the loop is not running
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


async def _settle(grace: float = 5.0) -> None:
    """Give the loop's other tasks (calls of other threads, their processes killed by stop) `grace` seconds to
    return what they got, then cancel the rest: their callers get SandboxError."""
    pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    if pending:
        _, late = await asyncio.wait(pending, timeout=grace)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
