"""What a verifier's run means: its reward, whether it passed, and whether it measured the agent or the environment.
Runs in: any Python >= 3.11, standard library only; evals (the Harbor adapter, job-dir scoring), RL episodes (in
process and on episode servers), the scripted teacher and rejection sampling all decide here.

Three outcomes of a trial or an episode (`SCORED`, `AGENT_FAILURE`, `INFRA_FAILURE`), one vocabulary of
infrastructure kinds (`INFRA_KINDS`) and one of tamper evidence (`TAMPER_KINDS`, gathered by harbor_tasks/evidence.py);
docs/evaluation.md says why each case falls where it does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import (
    NETWORK_FIX,
    NetworkNeededError,
    SandboxError,
    VerifierToolsMissingError,
)

PASS_THRESHOLD = 0.999  # a reward at or above it passes (EvoCode-Bench's compute_metrics.py uses the same)

SCORED, AGENT_FAILURE, INFRA_FAILURE = "scored", "agent_failure", "infra_failure"
OUTCOMES = (SCORED, AGENT_FAILURE, INFRA_FAILURE)
# environment_build: the task's environment could not be built (a Dockerfile step, no image, a start that timed out);
# verifier_tools: the verifier could not run its own tools; network: a step needed the network and had none;
# sandbox: the sandbox or the environment layer failed (start, a command, transfers, Harbor's own)
INFRA_KINDS = ("environment_build", "verifier_tools", "network", "sandbox")
# What an agent did to its verifier's run (harbor_tasks/evidence.py gathers it from the host, the harness's side):
# verifier_paths: /tests, /logs/verifier (a reward file written before the tests ran) or a file pytest reads from /
# changed outside the verifier; shadowed_tools: a verifier tool on PATH (a shim earlier than the real one) or a file
# its runner loads (pytest's packages, site hooks) differs from the environment as built; background_writes: a
# process outside the verifier's own wrote while the verifier ran. A run with any of them is never an infrastructure
# failure: its reward stands, recorded with its kinds (RL zeroes or masks it, evals count it)
TAMPER_KINDS = ("verifier_paths", "shadowed_tools", "background_writes")

# Exception class names (what Harbor records as `exception_info.exception_type`) that are infrastructure failures:
# ours (sandbox/errors.py) and Harbor's, as its error policy (harbor/models/trial/error_policy.py) files them under
# "sandbox failed" and "harbor failed" (tests/eval/test_outcomes.py holds the two lists equal)
INFRA_EXCEPTIONS: dict[str, str] = {
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

VERIFIER_TOOLS = ("python", "python3", "pytest", "py.test", "pip", "pip3", "uv", "uvx", "node", "npm", "npx",
                  "curl", "wget", "bash")
_MISSING = (
    re.compile(r"(?:^|: )(?P<tool>[\w.+-]+): (?:command )?not found\s*$", re.M),      # bash, dash, exec
    re.compile(r"env: [‘'\"]?(?P<tool>[\w.+-]+)[’'\"]?: No such file or directory", re.M),  # #!/usr/bin/env python
    re.compile(r"No module named [‘'\"]?(?P<tool>pytest)\b", re.M),
)

# Where a verifier writes (Harbor's EnvironmentPaths); the harness reads its reward files from the host
# (harbor_tasks/evidence.py), at most READ_LIMIT bytes each, so a flood cannot fill the host
VERIFIER_DIR = "/logs/verifier"
TEST_STDOUT = "test-stdout.txt"
TAMPER_FILE = "tamper.json"  # the harness's record beside a trial's verifier files: {TAMPER_KINDS kind: detail}
READ_LIMIT = 65536


def passed(reward: float | None) -> bool:
    """Whether a reward passes (>= PASS_THRESHOLD); None (no reward) does not."""
    return reward is not None and reward >= PASS_THRESHOLD


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reward_from_rewards(rewards) -> float | None:
    """A trial's reward from its rewards (Harbor's `verifier_result.rewards`, or reward.json's object): the "reward"
    key, else the mean of its numbers; a bare number stands; None when there is none."""
    if _number(rewards):
        return float(rewards)
    if not isinstance(rewards, dict):
        return None
    if _number(rewards.get("reward")):
        return float(rewards["reward"])
    values = [v for v in rewards.values() if _number(v)]
    return float(sum(values) / len(values)) if values else None


def reward_of(reward_json: str | None, reward_txt: str | None) -> float | None:
    """The reward Harbor reads from a verifier's files: reward.json (reward_from_rewards) before reward.txt."""
    if reward_json and reward_json.strip():
        try:
            data = json.loads(reward_json)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return reward_from_rewards(data)
    if reward_txt and reward_txt.strip():
        try:
            return float(reward_txt.strip())
        except ValueError:
            return None
    return None


def read_reward_dir(verifier_dir: Path) -> float | None:
    """reward_of a verifier folder on this machine (a Harbor trial's verifier/ or steps/<step>/verifier/)."""
    texts = []
    for name in ("reward.json", "reward.txt"):
        try:
            texts.append((Path(verifier_dir) / name).read_text(errors="replace")[:READ_LIMIT])
        except OSError:
            texts.append(None)
    return reward_of(*texts)


def read_tamper_dir(verifier_dir: Path) -> dict[str, str]:
    """The tamper evidence the harness recorded in a verifier folder on this machine (TAMPER_FILE; {} without)."""
    try:
        data = json.loads((Path(verifier_dir) / TAMPER_FILE).read_text(errors="replace")[:READ_LIMIT])
    except (OSError, ValueError):
        return {}
    return {kind: str(data[kind]) for kind in TAMPER_KINDS if isinstance(data, dict) and kind in data}


def missing_tools(output: str) -> list[str]:
    """The verifier tools (``VERIFIER_TOOLS``) its output says are missing, in order, each once."""
    found: list[str] = []
    for pattern in _MISSING:
        for match in pattern.finditer(output):
            tool = match.group("tool")
            if tool in VERIFIER_TOOLS and tool not in found:
                found.append(tool)
    return found


def diagnose(reward: float | None, output: str, *, verifier_names: list[str], agent_names: list[str] = (),
             internet_allowed: bool = False, userland: str = "host userland", tampered: bool = False,
             absent_tools: list[str] | None = None) -> SandboxError | None:
    """The infrastructure failure behind a verifier run that did not pass, or None when its reward stands.

    - the verifier asked the sandbox's resolver for a name (it needed the network to fetch its runner): network;
    - its output says one of its own tools (VERIFIER_TOOLS) is missing: verifier_tools;
    - the task declares internet, the sandbox gave none, and the agent asked for names: network (phase agent).
    Only names asked by processes of a running command count for the verifier, so a daemon the agent left behind
    cannot turn its own failure into an infrastructure one; likewise `output` is the harness's capture of the test
    process (not a file the sandbox can still write), and with `absent_tools` (what the harness found missing on the
    verifier's PATH, looking from the host) only those tools count. A `tampered` run is never diagnosed."""
    if passed(reward) or tampered:
        return None
    tail = output.strip()[-1500:]
    if verifier_names:
        return NetworkNeededError(
            f"the verifier needed the network (it asked for {', '.join(verifier_names[:5])}) and did not pass "
            f"(reward {reward}); {NETWORK_FIX}\n--- verifier output (end) ---\n{tail}",
            phase="verifier", names=verifier_names)
    tools = [t for t in missing_tools(output) if absent_tools is None or t in absent_tools]
    if tools:
        return VerifierToolsMissingError(
            f"the verifier could not run its tools: {', '.join(tools)} missing in the sandbox ({userland}); give "
            "the sandbox the task's image (--ek images=FILE) or use a container environment (--env docker|podman|"
            f"daytona)\n--- verifier output (end) ---\n{tail}")
    if internet_allowed and agent_names:
        return NetworkNeededError(
            f"the task allows internet, the sandbox has none, and the agent asked for {', '.join(agent_names[:5])}; "
            f"its reward ({reward}) measures the missing network; {NETWORK_FIX}",
            phase="agent", names=agent_names)
    return None


def classify(exception: str | None, agent_started: bool = True) -> tuple[str, str | None]:
    """(outcome, infra kind or None) of a trial from its exception's class name and whether its agent started."""
    if not exception:
        return SCORED, None
    if exception in INFRA_EXCEPTIONS:
        return INFRA_FAILURE, INFRA_EXCEPTIONS[exception]
    if not agent_started and exception not in NOT_INFRA_BEFORE_AGENT:
        return INFRA_FAILURE, "sandbox"
    return AGENT_FAILURE, None


def infra_kind(error: BaseException) -> str:
    """The infrastructure kind of a sandbox error (its class or the nearest base that INFRA_EXCEPTIONS names)."""
    for cls in type(error).__mro__:
        if cls.__name__ in INFRA_EXCEPTIONS:
            return INFRA_EXCEPTIONS[cls.__name__]
    return "sandbox"


@dataclass(frozen=True)
class Verdict:
    """One trial's or episode's outcome. `reward` is what the verifier wrote (None: nothing readable); `score` what
    counts in means and advantages: the reward, 0.0 for an agent failure without one, None for an infrastructure
    failure (never a score)."""

    outcome: str
    reward: float | None = None
    infra_kind: str | None = None
    detail: str = ""
    error: SandboxError | None = None  # the infrastructure failure, as the Harbor adapter raises it
    tamper: tuple[tuple[str, str], ...] = ()  # (TAMPER_KINDS kind, what was seen), each kind once

    @property
    def tamper_kinds(self) -> list[str]:
        return [kind for kind, _ in self.tamper]

    @property
    def score(self) -> float | None:
        if self.outcome == INFRA_FAILURE:
            return None
        return self.reward if self.reward is not None else 0.0

    @property
    def passed(self) -> bool:
        return self.outcome != INFRA_FAILURE and passed(self.reward)


def infra_failure(error: BaseException | str, kind: str | None = None) -> Verdict:
    """The verdict of a run the environment failed: `kind` (INFRA_KINDS), else the sandbox error's own."""
    if kind is None:
        kind = infra_kind(error) if isinstance(error, BaseException) else "sandbox"
    if kind not in INFRA_KINDS:
        raise ValueError(f"infra kind {kind!r}: one of {', '.join(INFRA_KINDS)}")
    return Verdict(INFRA_FAILURE, None, kind, str(error).splitlines()[0] if str(error) else type(error).__name__,
                   error if isinstance(error, SandboxError) else None)


def tamper_evidence(found) -> tuple[tuple[str, str], ...]:
    """`found` ({kind: detail} or (kind, detail) pairs) checked against TAMPER_KINDS, in their order."""
    found = dict(found or {})
    unknown = [kind for kind in found if kind not in TAMPER_KINDS]
    if unknown:
        raise ValueError(f"tamper kind {unknown[0]!r}: one of {', '.join(TAMPER_KINDS)}")
    return tuple((kind, str(found[kind])) for kind in TAMPER_KINDS if kind in found)


def judge_verifier_run(reward_json: str | None, reward_txt: str | None, output: str = "", *,
                       timed_out: bool = False, verifier_names: list[str] = (), agent_names: list[str] = (),
                       internet_allowed: bool = False, userland: str = "host userland", tamper=(),
                       absent_tools: list[str] | None = None) -> Verdict:
    """The verdict of one verifier run from what it left (reward.json, reward.txt, its output as the harness
    captured it) and what the sandbox saw (names asked by the verifier's and the agent's processes; what the agent did
    to the run, `tamper`: {kind: detail}; the tools missing on the verifier's PATH, `absent_tools`).

    - timed out: an agent failure (Harbor's VerifierTimeoutError; a partial reward does not count);
    - a reward that passes stands; one that does not, or no reward, is diagnosed (diagnose): an infrastructure
      failure where the run measured the environment, never when it was tampered with;
    - otherwise scored with its reward, or an agent failure (0) when it wrote none (Harbor's
      RewardFileNotFoundError). The tamper evidence rides along on every outcome."""
    tamper = tamper_evidence(tamper)
    if timed_out:
        return Verdict(AGENT_FAILURE, None, None, "the verifier ran past its timeout", tamper=tamper)
    reward = reward_of(reward_json, reward_txt)
    failure = diagnose(reward, output, verifier_names=list(verifier_names), agent_names=list(agent_names),
                       internet_allowed=internet_allowed, userland=userland, tampered=bool(tamper),
                       absent_tools=absent_tools)
    if failure is not None:
        return Verdict(INFRA_FAILURE, None, infra_kind(failure), str(failure).splitlines()[0], failure)
    if reward is None:
        return Verdict(AGENT_FAILURE, None, None, "the verifier wrote no reward", tamper=tamper)
    return Verdict(SCORED, reward, tamper=tamper)


def agent_started(result: dict | None) -> bool:
    """Whether a Harbor trial's agent ran: False only when its result.json shows the environment set up (or failing
    to) and no agent run at all, at trial or step level."""
    if not isinstance(result, dict) or not result.get("environment_setup"):
        return True  # not known: never inferred
    steps = result.get("step_results") if isinstance(result.get("step_results"), list) else []
    return bool(result.get("agent_execution")) or any((s or {}).get("agent_execution") for s in steps)


def trial_verdict(result: dict | None) -> Verdict:
    """A Harbor trial's verdict from its result.json: its exception (classify) and its verifier's rewards
    (reward_from_rewards); what rejection sampling keeps or drops."""
    result = result if isinstance(result, dict) else {}
    info = result.get("exception_info")
    exception = info.get("exception_type") if isinstance(info, dict) else None
    outcome, kind = classify(exception, agent_started(result))
    if outcome == INFRA_FAILURE:
        return Verdict(INFRA_FAILURE, None, kind, exception or "")
    verifier = result.get("verifier_result")
    reward = reward_from_rewards(verifier.get("rewards") if isinstance(verifier, dict) else None)
    return Verdict(outcome, reward, None, exception or "")

