"""A local namespace sandbox: run commands in a throw-away root on this host, without Docker.

Runs in: any Python >= 3.11, standard library only; used by the Harbor adapter (harbor_plugins/,
Harbor venv) and directly by training code (training venv).

    from sandbox import BlockingSandbox, SandboxConfig
    with BlockingSandbox(SandboxConfig(memory_mb=1024, workdir="/app")) as sb:
        sb.upload_file("main.py", "/app/main.py")
        result = sb.exec("python3 main.py", timeout_sec=30)   # ExecResult(stdout, stderr, return_code)

``Sandbox`` is the asyncio original (``async with Sandbox(config) as sb: await sb.exec(...)``).
Modules: ``core`` (Sandbox, ExecResult), ``blocking`` (BlockingSandbox), ``config`` (SandboxConfig),
``errors``, ``init`` (the sandbox's PID 1), ``enter`` (runs one command inside: namespaces, dropped
capabilities, seccomp), ``seccomp`` (the filter's allow-list and syscall tables, as data), ``cgroup``
(limits as root), ``dockerfile`` (the replayed Dockerfile subset), ``transfer`` (tar in and out,
streamed and capped), ``processes`` (host-side kills), ``images`` (image references -> unpacked root file
systems, ``SandboxConfig.rootfs``), ``verifier`` (why a verifier's run measured the environment, not the agent).
"""

from sandbox.blocking import BlockingSandbox
from sandbox.config import SandboxConfig
from sandbox.core import ExecResult, Sandbox, missing_host_tools
from sandbox.errors import (EnvironmentBuildError, NetworkNeededError, SandboxError, SandboxExecTimeoutError,
                            VerifierToolsMissingError)

__all__ = ["BlockingSandbox", "EnvironmentBuildError", "ExecResult", "NetworkNeededError", "Sandbox",
           "SandboxConfig", "SandboxError", "SandboxExecTimeoutError", "VerifierToolsMissingError",
           "missing_host_tools"]
