"""Whether a verifier's run measured the agent or the environment: ``diagnose``. Runs in: any Python >= 3.11,
standard library only (the Harbor adapter and the training code's episodes use it alike).

A verifier that passed stands. One that did not pass measured the environment, not the agent, when
- it asked the sandbox's resolver for a name (``network="none"``): it needed the network to fetch its runner
  (``curl .../uv/install.sh``, ``pip install pytest``), which the sandbox does not have -> ``NetworkNeededError``;
- its output says one of its own tools is missing (``python: command not found``, ``No module named pytest``):
  only interpreters, test runners and fetchers (``VERIFIER_TOOLS``) count, since a task may well ask the agent
  to provide some other command -> ``VerifierToolsMissingError``;
- the task says it needs internet (``allow_internet = true``, not a default), the sandbox gave it none, and the
  agent asked for names -> ``NetworkNeededError`` (phase ``agent``): the agent could not do what the task let it
  do. (Not where internet is merely not forbidden: an agent must not get out of its 0 by trying the network.)
Only names asked by processes of a running command count for the verifier (``Sandbox.names_asked(...,
commands_only=True)``): a daemon the agent left behind cannot turn its own failure into an infrastructure one.
"""

from __future__ import annotations

import json
import re

from sandbox.errors import NETWORK_FIX, NetworkNeededError, SandboxError, VerifierToolsMissingError

PASS_THRESHOLD = 0.999  # a reward at or above it passes (eval.metrics uses the same)
VERIFIER_TOOLS = ("python", "python3", "pytest", "py.test", "pip", "pip3", "uv", "uvx", "node", "npm", "npx",
                  "curl", "wget", "bash")
_MISSING = (
    re.compile(r"(?:^|: )(?P<tool>[\w.+-]+): (?:command )?not found\s*$", re.M),      # bash, dash, exec
    re.compile(r"env: [‘'\"]?(?P<tool>[\w.+-]+)[’'\"]?: No such file or directory", re.M),  # #!/usr/bin/env python
    re.compile(r"No module named [‘'\"]?(?P<tool>pytest)\b", re.M),
)


def reward_of(reward_json: str | None, reward_txt: str | None) -> float | None:
    """The reward Harbor reads: reward.json ("reward", else the mean of its numbers) before reward.txt."""
    if reward_json:
        try:
            data = json.loads(reward_json)
        except ValueError:
            data = None
        if isinstance(data, dict):
            if isinstance(data.get("reward"), (int, float)) and not isinstance(data.get("reward"), bool):
                return float(data["reward"])
            values = [v for v in data.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            return sum(values) / len(values) if values else None
    if reward_txt:
        try:
            return float(reward_txt.strip())
        except ValueError:
            return None
    return None


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
             internet_allowed: bool = False, userland: str = "host userland") -> SandboxError | None:
    """The infrastructure failure behind a verifier run that did not pass (see the module docstring), or None
    when its reward stands."""
    if reward is not None and reward >= PASS_THRESHOLD:
        return None
    tail = output.strip()[-1500:]
    if verifier_names:
        return NetworkNeededError(
            f"the verifier needed the network (it asked for {', '.join(verifier_names[:5])}) and did not pass "
            f"(reward {reward}); {NETWORK_FIX}\n--- verifier output (end) ---\n{tail}",
            phase="verifier", names=verifier_names)
    tools = missing_tools(output)
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
