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


def wait_until_healthy(url: str, process: subprocess.Popen, timeout: float, details=lambda: "") -> None:
    """Poll `url`/health until it answers 200; a clear error if the process exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with code {process.returncode}{details()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}/health did not answer within {timeout:.0f} s{details()}")
        time.sleep(0.2)


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
        def log_tail() -> str:
            log.seek(0)
            return ":\n" + log.read()[-2000:]

        wait_until_healthy(url, process, startup_timeout, log_tail)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
