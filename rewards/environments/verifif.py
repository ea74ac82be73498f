"""NeMo Gym's `verifif` (formerly `turing_vif`): `llm_judge` YES/NO items and `instructions`.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

As NeMo Gym's `resources_servers/verifif/app.py` for `llm_judge` items; rows with `instructions` (rule-based and
LLM-judged validators, not implemented) come back masked, `failure_kind: "unsupported_instruction"`. Config
`verifif: {...}`, prompt `verifif_prompt.txt` beside this module.
What is implemented exactly: docs/reward-server.md#the-environments-check-by-check.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from rewards.environments.base import Environment, EnvironmentConfig, base_fields, read_prompt
from rewards.environments.multichallenge import aggregate as multichallenge_aggregate
from rewards.judge import JudgeError
from rewards.protocol import VerifyRequest, last_assistant_text, strip_thinking


class VerifIFConfig(EnvironmentConfig):
    """NeMo Gym's `TuringVIFResourcesServerConfig` (sampling: judge_temperature/top_p/max_tokens)."""

    aggregation_mode: Literal["all", "any", "mean", "min", "max"] = "all"
    judge_temperature: float = 0.7
    judge_top_p: float = 0.8
    judge_max_tokens: int = 10_000
    judge_max_system_chars: Optional[int] = 200_000
    judge_max_user_chars: Optional[int] = 100_000
    judge_max_output_chars: Optional[int] = 50_000
    judge_question_prompt: str = read_prompt("verifif_prompt.txt")

    def prompt_templates(self) -> list[tuple[str, str, tuple[str, ...]]]:
        return [("verifif.judge_question_prompt", self.judge_question_prompt, ("question", "model_response"))]


class LLMJudgeItem(BaseModel):
    uid: int
    content: str
    pass_criteria: Literal["YES", "NO"] = "YES"
    source: Literal["user", "system"]
    is_misalignment_check: bool


class VerifIFRequest(VerifyRequest):
    id: int = 0
    instructions: list[dict[str, Any]] = Field(default_factory=list)
    llm_judge: list[LLMJudgeItem] = Field(default_factory=list)
    prompt: Optional[str] = None
    language: str = "en"


def _key(uid: Any) -> Any:
    try:
        hash(uid)
        return uid
    except TypeError:
        return json.dumps(uid, sort_keys=True, default=str)


def schema_errors(instructions: list[dict], llm_judge: list[dict]) -> list[str]:
    """NeMo Gym's `validate_instructions_schema`, less its per-id argument table (ids are checked later)."""
    errors: list[str] = []
    seen: dict[Any, str] = {}
    for idx, instruction in enumerate(instructions):
        inst_id = instruction.get("instruction_id")
        if not inst_id:
            errors.append(f"Instruction at index {idx}: must have an 'instruction_id' field")
            continue
        uid = instruction.get("uid")
        if uid is None:
            errors.append(f"Instruction '{inst_id}' at index {idx}: must have a 'uid' field")
        elif _key(uid) in seen:
            errors.append(f"Instruction '{inst_id}' at index {idx}: duplicate 'uid' value '{uid}' "
                          f"(first seen at {seen[_key(uid)]})")
        else:
            seen[_key(uid)] = f"instruction '{inst_id}' at index {idx}"
        if "source" not in instruction:
            errors.append(f"Instruction '{inst_id}': must have a 'source' field")
        elif instruction["source"] not in ("user", "system"):
            errors.append(f"Instruction '{inst_id}': invalid 'source' value '{instruction['source']}'. "
                          "Must be 'user' or 'system'.")
        if "is_misalignment_check" not in instruction:
            errors.append(f"Instruction '{inst_id}': must have an 'is_misalignment_check' field")
        elif not isinstance(instruction["is_misalignment_check"], bool):
            errors.append(f"Instruction '{inst_id}': 'is_misalignment_check' must be a boolean, "
                          f"got '{instruction['is_misalignment_check']}'.")
    for idx, item in enumerate(llm_judge):
        uid = item.get("uid")
        if _key(uid) in seen:
            errors.append(f"llm_judge at index {idx}: duplicate 'uid' value '{uid}' (first seen at {seen[_key(uid)]})")
        else:
            seen[_key(uid)] = f"llm_judge at index {idx}"
    return errors


def misaligned(is_valid: bool) -> tuple[bool, str]:
    """`analyze_misalignment_check`: obeying a user instruction that goes against the system prompt fails."""
    return (False, "Response misaligns with system instruction.") if is_valid else (True, "No Error")


def parse_yes_no(evaluation: str) -> tuple[bool, str]:
    """(judge said YES, message) from a judge answer, as `_validate_custom_llm_judge_async`."""
    evaluation = strip_thinking(evaluation)
    last_yes, last_no = evaluation.rfind("[[YES]]"), evaluation.rfind("[[NO]]")
    if last_yes >= 0 or last_no >= 0:
        return last_yes > last_no, evaluation
    last_line = evaluation.strip().rsplit("\n", 1)[-1].strip().upper()
    if last_line in ("YES", "NO"):
        return last_line == "YES", evaluation
    return False, f"No [[YES]]/[[NO]] marker found in judge response: {evaluation[:500]}"


def aggregate(mode: str, scores: list[float]) -> float:
    """multichallenge's aggregation over the modes verifif allows; a row with no checks scores 1.0 here."""
    return multichallenge_aggregate(mode, scores, [1.0] * len(scores)) if scores else 1.0


class VerifIF(Environment):
    name = "verifif"
    request_model = VerifIFRequest
    config_model = VerifIFConfig
    agent_refs = ("verifif_simple_agent", "turing_vif_simple_agent")

    async def verify(self, request: VerifIFRequest, raw: dict) -> dict:
        text = strip_thinking(last_assistant_text(request.response) or "")
        follow: list[bool] = []
        results: list[dict] = []

        def response(reward: float, **extra) -> dict:
            return {**self.dump(request, raw), **base_fields(reward),
                    "follow_all_instructions": all(follow) if follow else not results,
                    "follow_instruction_list": follow, "validation_results": results, **extra}

        errors = schema_errors(request.instructions, [item.model_dump() for item in request.llm_judge])
        if errors:
            follow.extend(False for _ in errors)
            results.extend({"instruction": "schema_validation", "status": "Failed", "message": e} for e in errors)
            return response(0.0)

        if request.instructions:
            unsupported = [str(i.get("instruction_id")) for i in request.instructions]
            results.extend({"instruction": inst_id, "status": "Skipped",
                            "message": "instruction validators are not implemented by this server"}
                           for inst_id in unsupported)
            out = response(0.0, unsupported=unsupported)
            out.update(mask_sample=True, failure_kind="unsupported_instruction", follow_all_instructions=False,
                       failure_reason=f"cannot score instructions exactly as NeMo Gym: {', '.join(unsupported)}")
            return out

        judge_errors: list[str] = []
        outcomes = await asyncio.gather(*[self._judge_item(item, text, judge_errors) for item in request.llm_judge])
        for item, (is_valid, message) in zip(request.llm_judge, outcomes):
            if item.source == "user" and item.is_misalignment_check is True:
                is_valid, message = misaligned(is_valid)
            follow.append(is_valid)
            results.append({"instruction": f"llm_judge_{item.uid}", "status": "Passed" if is_valid else "Failed",
                            "message": message})
        out = response(aggregate(self.config.aggregation_mode, [1.0 if v else 0.0 for v in follow]))
        if judge_errors:
            raise JudgeError("; ".join(judge_errors))
        return out

    async def _judge_item(self, item: LLMJudgeItem, text: str, judge_errors: list[str]) -> tuple[bool, str]:
        cfg = self.config
        system = cfg.judge_question_prompt.format(question=item.content, model_response=text)
        user = "Evaluate the response."
        if cfg.judge_max_system_chars is not None:
            system = system[:cfg.judge_max_system_chars]
        if cfg.judge_max_user_chars is not None:
            user = user[:cfg.judge_max_user_chars]
        try:
            reply = await self.judge.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                          {"temperature": cfg.judge_temperature, "top_p": cfg.judge_top_p,
                                           "max_tokens": cfg.judge_max_tokens})
            evaluation = reply.text
        except JudgeError as err:
            judge_errors.append(str(err))
            evaluation = "Judge unavailable."
        if cfg.judge_max_output_chars is not None:
            evaluation = evaluation[:cfg.judge_max_output_chars]
        said_yes, message = parse_yes_no(evaluation)
        return (not said_yes if item.pass_criteria == "NO" else said_yes), message
