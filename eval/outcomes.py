"""The three outcomes of a trial, and the kinds of infrastructure failure: the one place that decides them
(eval/job_dir.py records each trial's, eval/metrics.py keeps infrastructure failures out of the means).

    scored          no exception: the verifier's reward.
    agent_failure   an exception the agent's run caused or that Harbor scores (AgentTimeoutError, context and
                    parse errors, a verifier timeout, no reward file, ...): counted as its reward (missing = 0),
                    as Harbor and the Terminal-Bench leaderboard count them.
    infra_failure   the environment failed, not the agent; never a score. Kinds (INFRA_KINDS):
        environment_build  the task's environment could not be built: a Dockerfile step failed, no image, a
                           multi-container task on a one-container environment, the start timed out;
        verifier_tools     the verifier could not run its own tools (python, pytest, uv missing);
        network            a step needed the network and had none (a build step or the verifier asked for names);
        sandbox            the sandbox or the environment layer failed (start, transfers, Harbor's own).
                    Also any other exception of a trial whose agent never started (it cannot be the agent's
                    doing): kind sandbox.

The exception names are the class names Harbor records (`exception_info.exception_type`): ours from
sandbox/errors.py, and Harbor's own, as its error policy (harbor/models/trial/error_policy.py) files them under
"sandbox failed" and "harbor failed" (tests/test_eval_outcomes.py checks the two lists agree).
"""

from __future__ import annotations

SCORED, AGENT_FAILURE, INFRA_FAILURE = "scored", "agent_failure", "infra_failure"
OUTCOMES = (SCORED, AGENT_FAILURE, INFRA_FAILURE)
INFRA_KINDS = ("environment_build", "verifier_tools", "network", "sandbox")
INFRA_MODES = ("exclude", "zero")  # infrastructure failures: left out of the means, or counted as 0 there

INFRA_EXCEPTIONS: dict[str, str] = {
    # this repo's sandbox (sandbox/errors.py)
    "NetworkNeededError": "network",
    "VerifierToolsMissingError": "verifier_tools",
    "EnvironmentBuildError": "environment_build",
    "SandboxError": "sandbox",
    # Harbor's "sandbox failed"
    "SandboxBuildFailedError": "environment_build",
    "EnvironmentStartTimeoutError": "environment_build",
    "HealthcheckError": "environment_build",
    "AgentSetupTimeoutError": "sandbox",
    "SandboxLikelyOutOfMemoryError": "sandbox",
    "MemoryLimitExceededError": "sandbox",
    "SSHAccessError": "sandbox",
    "GKEExecStreamClosedError": "sandbox",
    "GKEPodNotFoundError": "sandbox",
    "RuntimeRequestError": "sandbox",
    "AddTestsDirError": "sandbox",
    "DownloadVerifierDirError": "sandbox",
    # Harbor's "harbor failed"
    "ServiceOperationsUnsupportedError": "sandbox",
    "VercelScopeError": "sandbox",
    "DspyImportError": "sandbox",
    "MissingExtraError": "sandbox",
    "RegradeError": "sandbox",
}
# an exception before the agent ran is the environment's; these are not (the user stopped the job)
NOT_INFRA_BEFORE_AGENT = ("CancelledError", "KeyboardInterrupt")


def classify(exception: str | None, agent_started: bool = True) -> tuple[str, str | None]:
    """(outcome, infra kind or None) of a trial from its exception type and whether its agent started."""
    if not exception:
        return SCORED, None
    if exception in INFRA_EXCEPTIONS:
        return INFRA_FAILURE, INFRA_EXCEPTIONS[exception]
    if not agent_started and exception not in NOT_INFRA_BEFORE_AGENT:
        return INFRA_FAILURE, "sandbox"
    return AGENT_FAILURE, None


def outcome_of(trial) -> tuple[str, str | None]:
    """A trial record's (outcome, infra kind): as eval/job_dir.py recorded it, else from its exception alone."""
    if trial.get("outcome") in OUTCOMES:
        return trial["outcome"], trial.get("infra_kind")
    return classify(trial.get("exception"))


def is_infra(trial) -> bool:
    return outcome_of(trial)[0] == INFRA_FAILURE
