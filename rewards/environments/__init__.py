"""The registry of reward environments: the server config, the `--environment` flag and the routing derive from it.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

To add an environment: write its module here (see `base.py`: its config, `Environment` subclass and prompt file),
then add its class to the tuple below.
"""

from __future__ import annotations

from rewards.environments.base import Environment, EnvironmentConfig
from rewards.environments.multichallenge import MultiChallenge
from rewards.environments.terminus_functional import TerminusFunctional
from rewards.environments.terminus_judge import TerminusJudge
from rewards.environments.verifif import VerifIF

ENVIRONMENTS: dict[str, type[Environment]] = {cls.name: cls for cls in (TerminusJudge, TerminusFunctional, MultiChallenge,
                                                                        VerifIF)}


def _agent_names() -> dict[str, str]:
    """agent_ref.name -> environment: NeMo Gym's agent names, and each environment's own name."""
    names: dict[str, str] = {}
    for name, cls in ENVIRONMENTS.items():
        for agent in (*cls.agent_refs, name):
            if names.setdefault(agent, name) != name:
                raise RuntimeError(f"agent_ref name {agent!r} is claimed by both {names[agent]} and {name}")
    return names


AGENT_NAMES: dict[str, str] = _agent_names()

__all__ = ["AGENT_NAMES", "ENVIRONMENTS", "Environment", "EnvironmentConfig"]
