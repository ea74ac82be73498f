"""What every environment shares: the request echo, request errors, and NeMo Gym's `judge_failsafe` row."""

from __future__ import annotations

from typing import Any, ClassVar

from rewards.judge import Judge, JudgeError
from rewards.protocol import VerifyRequest, dump_create_params


class RequestError(ValueError):
    """A request an environment cannot score because of its content (answered 422, naming the field)."""


class Environment:
    name: ClassVar[str]
    request_model: ClassVar[type[VerifyRequest]]

    def __init__(self, config: Any, judge: Judge):
        self.config = config
        self.judge = judge

    async def verify(self, request: VerifyRequest, raw: dict) -> dict:
        raise NotImplementedError

    @staticmethod
    def dump(request: VerifyRequest, raw: dict, exclude: frozenset[str] = frozenset()) -> dict:
        """`body.model_dump()` as NeMo Gym writes it: `responses_create_params` with its defaults, `response` as
        sent, the environment's own fields with their defaults, and (where the model allows extras) the row's
        other keys, in that order."""
        fields = request.model_dump(exclude={"responses_create_params", "response", *exclude})
        fields.pop("_ng_rollout_id", None)  # NeMo Gym's alias field, excluded from dumps
        return {"responses_create_params": dump_create_params(request.responses_create_params),
                "response": raw["response"], **fields}

    async def verify_failsafe(self, request: VerifyRequest, raw: dict) -> dict:
        """`judge_failsafe`: a failed judge call gives the request back with reward 0.0 and the sample masked."""
        try:
            return await self.verify(request, raw)
        except JudgeError as err:
            data = self.dump(request, raw)
            instance_config = data.get("instance_config")
            instance_config = dict(instance_config) if isinstance(instance_config, dict) else {}
            instance_config["mask_sample"] = True
            data.update({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed",
                         "failure_reason": str(err), "instance_config": instance_config,
                         "_ng_failure_class": "judge_failed", "_ng_failure_judge_error": str(err)})
            return data


def base_fields(reward: float, failure_reason: Any = None) -> dict:
    """NeMo Gym 0.7.0's BaseVerifyResponse fields after `responses_create_params` and `response`."""
    return {"reward": reward, "mask_sample": False, "failure_kind": None, "failure_reason": failure_reason}
