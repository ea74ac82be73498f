"""The sandbox's exceptions, each an infrastructure failure (the task's environment, not the agent, got it wrong).
Runs in: any Python >= 3.11, standard library only.

Their class names are what Harbor records as a trial's ``exception_type``; harbor_tasks/verdict.py sorts them
into kinds.
"""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The sandbox could not be set up or used (missing tools, kernel refused a namespace, no limits,
    a failed upload or download)."""


class EnvironmentBuildError(SandboxError):
    """The task's environment could not be built: a Dockerfile ``RUN`` that failed, a ``COPY`` source that is
    missing, an image root file system that could not be had. (The Harbor adapter raises it as Harbor's own
    ``SandboxBuildFailedError``.)"""


NETWORK_FIX = ("the local sandbox has no network: where the task allows internet give it one (--ek network=pasta or "
               "slirp4netns), give it an image that already holds what the step downloads (--ek images=FILE), or run "
               "the task in a container environment (--env docker|podman|daytona)")


class NetworkNeededError(SandboxError):
    """A step needed the network and the sandbox has none: names were asked of the sandbox's resolver (which
    answers none of them) by a Dockerfile ``RUN`` that then failed, or by a verifier that then did not pass.
    ``phase`` is ``build``, ``agent`` or ``verifier``; ``names`` the host names asked."""

    def __init__(self, message: str, phase: str = "", names: tuple[str, ...] | list[str] = ()):
        super().__init__(message)
        self.phase = phase
        self.names = tuple(names)


class VerifierToolsMissingError(SandboxError):
    """The verifier could not run its own tools (``python: command not found``, no pytest) in the sandbox's
    userland, so its reward measures the userland, not the agent."""


class SandboxExecTimeoutError(TimeoutError):
    """A command ran past its ``timeout_sec``; its process group was killed.

    A ``TimeoutError``, so inside Harbor's agent/verifier phases it is reported as
    ``AgentTimeoutError``/``VerifierTimeoutError``, like the phase's own timeout."""
