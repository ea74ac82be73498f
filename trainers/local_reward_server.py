"""A reward server on loopback for the length of a run, when the GRPO config names no reward_url."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def local_reward_server(config: str | None = None, startup_timeout: float = 120.0) -> Iterator[str]:
    """Start `python -m rewards.server` on a free loopback port, yield its URL, stop it afterwards."""
    port = free_port()
    command = [sys.executable, "-m", "rewards.server", "--host", "127.0.0.1", "--port", str(port)]
    if config:
        command += ["--config", config]
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the local reward server exited with code {process.returncode}:\n{log.read()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local reward server did not answer {url}/health within {startup_timeout:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
