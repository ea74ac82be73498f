"""A reward server on loopback for the length of a run, when the GRPO config names no reward_url.
Runs in: the trainer's process (the training venv), which starts `python -m rewards.server` as a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from common.net import free_port, stop_process, wait_until_healthy


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
        stop_process(process)
        log.close()
