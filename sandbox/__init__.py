"""A local namespace sandbox: run commands in a throw-away root on this host, without Docker.
Runs in: any Python >= 3.11, standard library only (the training venv, and the Harbor venv through harbor_plugins/).

    from sandbox import BlockingSandbox, SandboxConfig
    with BlockingSandbox(SandboxConfig(memory_mb=1024, workdir="/app")) as sb:
        sb.upload_file("main.py", "/app/main.py")
        result = sb.exec("python3 main.py", timeout_sec=30)   # ExecResult(stdout, stderr, return_code)

``Sandbox`` is the asyncio original. What it isolates and how: docs/sandbox.md.
"""

from sandbox.blocking import BlockingSandbox
from sandbox.config import SandboxConfig
from sandbox.core import ExecResult, Sandbox, missing_host_tools
from sandbox.errors import (EnvironmentBuildError, NetworkNeededError, SandboxError, SandboxExecTimeoutError,
                            VerifierToolsMissingError)
from sandbox.transfer import TASK_FILE_MAX_BYTES, read_regular_file

__all__ = ["BlockingSandbox", "EnvironmentBuildError", "ExecResult", "NetworkNeededError", "Sandbox",
           "SandboxConfig", "SandboxError", "SandboxExecTimeoutError", "TASK_FILE_MAX_BYTES", "VerifierToolsMissingError",
           "missing_host_tools", "read_regular_file"]
