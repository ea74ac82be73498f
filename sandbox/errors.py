"""The sandbox's exceptions. Runs in: any Python >= 3.11, standard library only."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The sandbox could not be set up or used (missing tools, kernel refused a namespace, no limits,
    a failed upload or download, a Dockerfile ``RUN`` that failed)."""


class SandboxExecTimeoutError(TimeoutError):
    """A command ran past its ``timeout_sec``; its process group was killed.

    A ``TimeoutError``, so inside Harbor's agent/verifier phases it is reported as
    ``AgentTimeoutError``/``VerifierTimeoutError``, like the phase's own timeout."""
