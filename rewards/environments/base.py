"""What every environment shares: its config base, its prompt files, the request echo, NeMo Gym's `judge_failsafe` row.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

An environment is one module here: an `EnvironmentConfig` subclass (its `NAME: {...}` config block), an
`Environment` subclass (`name`, `request_model`, `config_model`, `agent_refs`), its judge prompt in
`<module>_prompt.txt` (`read_prompt`), and one line in the registry (rewards/environments/__init__.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict

from rewards.judge import Judge, JudgeError
from rewards.protocol import VerifyRequest, dump_create_params

HERE = Path(__file__).resolve().parent


def read_prompt(filename: str) -> str:
    """A prompt file of this folder, exactly as written less the one newline that ends the file (so a prompt that
    itself begins or ends with a newline, as verifif's does, keeps it)."""
    text = (HERE / filename).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


class EnvironmentConfig(BaseModel):
    """An environment's `NAME: {...}` config block (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid")

    # the boolean field that turns the LLM judge on; None: the environment always calls a judge
    judge_switch: ClassVar[Optional[str]] = None

    @property
    def needs_judge(self) -> bool:
        return True if self.judge_switch is None else bool(getattr(self, self.judge_switch))

    def prompt_templates(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(where, template, placeholders) for each `str.format` prompt this config will fill; the server config
        checks them at load (raise ValueError naming the key when one cannot be read)."""
        return []


class Environment:
    name: ClassVar[str]
    request_model: ClassVar[type[VerifyRequest]]
    config_model: ClassVar[type[EnvironmentConfig]]
    agent_refs: ClassVar[tuple[str, ...]] = ()  # NeMo Gym's agent names routed here (besides `name` itself)

    def __init__(self, config: Any, judge: Judge):
        self.config = config
        self.judge = judge

    async def verify(self, request: VerifyRequest, raw: dict) -> dict:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release what the environment holds (thread pools); the app calls it at shutdown."""

    @staticmethod
    def dump(request: VerifyRequest, raw: dict, exclude: frozenset[str] = frozenset()) -> dict:
        """`body.model_dump()` as NeMo Gym writes it: `responses_create_params` with its defaults, `response` as
        sent, the environment's own fields with their defaults, and (where the model allows extras) the row's
        other keys, in that order."""
        fields = request.model_dump(exclude={"responses_create_params", "response", *exclude})
        fields.pop("_ng_rollout_id", None)  # NeMo Gym's alias field, excluded from dumps
        return {"responses_create_params": dump_create_params(request.responses_create_params),
                "response": raw["response"], **fields}

    async def verify_failsafe(self, request: VerifyRequest, raw: dict, deadline: Optional[float] = None) -> dict:
        """`judge_failsafe`: a failed judge call gives the request back with reward 0.0 and the sample masked. So
        does a verify past its `deadline` (seconds, end to end: judge slot waits, attempts, retries and backoff);
        its judge calls are cancelled, and `failure_reason` names the deadline."""
        try:
            if deadline is None:
                return await self.verify(request, raw)
            return await asyncio.wait_for(self.verify(request, raw), deadline)
        except JudgeError as err:
            return self.judge_failed(request, raw, str(err))
        except asyncio.TimeoutError:  # (the judge's own per-attempt deadline is a JudgeError)
            return self.judge_failed(request, raw, f"verify_timeout: no score within the server's {deadline:g} s "
                                                   "verify_timeout (judge slot waits and retries included)")

    def judge_failed(self, request: VerifyRequest, raw: dict, reason: str) -> dict:
        data = self.dump(request, raw)
        instance_config = data.get("instance_config")
        instance_config = dict(instance_config) if isinstance(instance_config, dict) else {}
        instance_config["mask_sample"] = True
        data.update({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed",
                     "failure_reason": reason, "instance_config": instance_config,
                     "_ng_failure_class": "judge_failed", "_ng_failure_judge_error": reason})
        return data


def base_fields(reward: float, failure_reason: Any = None) -> dict:
    """NeMo Gym 0.7.0's BaseVerifyResponse fields after `responses_create_params` and `response`."""
    return {"reward": reward, "mask_sample": False, "failure_kind": None, "failure_reason": failure_reason}
