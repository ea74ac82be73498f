"""Loopback servers: a free port, waiting for `/health`, stopping a server's process group; a bind that needs a token.
Runs in: the training venv (standard library only); in the process that starts a server (eval, rewards, tests).
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def is_loopback(host: str) -> bool:
    """Whether a server bound to `host` is reachable from this machine only: every address the name resolves to is
    a loopback one (127.0.0.0/8, ::1, `localhost`). `0.0.0.0`, `::`, an empty host, a network address are not."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP) if host else []
        return bool(found) and all(ipaddress.ip_address(info[4][0].partition("%")[0]).is_loopback for info in found)
    except (OSError, UnicodeError, ValueError):
        return False


def token_needed(host: str, token: str | None, token_env: str, serves: str) -> str | None:
    """The one line that refuses a server reachable from other machines without a bearer token (the repository's
    servers: episodes.server, rewards.server), or None when `host` is loopback or a token is set. `serves`: what
    anyone who reached it could make it do."""
    if token or is_loopback(host):
        return None
    return (f"--host {host} can be reached from other machines, and this server {serves}: give it a bearer token "
            f"(--auth_token T, or ${token_env}) and its clients the same, or bind to 127.0.0.1")


def wait_until_healthy(url: str, process: subprocess.Popen | None, timeout: float,
                       details: Callable[[], str] = lambda: "", interval: float = 0.2) -> None:
    """Poll `url`/health until it answers 200. A clear error (naming the URL, plus `details()`, e.g. the server's
    log tail) if the process exits first (RuntimeError) or `timeout` seconds pass (TimeoutError)."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with code {process.returncode} before answering "
                               f"{url}/health{details()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}/health did not answer within {timeout:g} s{details()}")
        time.sleep(interval)


def stop_process(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the process group (servers with workers: vLLM, uvicorn --workers), SIGKILL after `grace` s.
    A process not started with `start_new_session=True` gets the signals itself."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            if os.getpgid(process.pid) == process.pid:
                os.killpg(process.pid, sig)
            else:
                process.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
