"""Reward server configuration: one YAML file (configs/rewards/*.yaml), overridden by command-line flags.

```yaml
environment: null          # null: every environment, routed by agent_ref.name; or pin one (terminus_judge, ...)
auth_token: null           # bearer token for every endpoint but /health
max_body_bytes: 33554432
judge: {base_url: http://host:8000/v1, model: NAME, api_key: null, max_concurrency: 64, timeout: 120, retries: 3}
terminus_judge: {...}      # TerminusJudgeConfig
multichallenge: {...}      # MultiChallengeConfig
verifif: {...}             # VerifIFConfig
```
The environment defaults are NeMo Gym's, except terminus_judge, whose default is NeMo Gym's
`terminus_judge_string_only.yaml` (string similarity >= 0.9, no judge: how NVIDIA scores the pivot set).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rewards.judge import JudgeSettings

ENVIRONMENTS = ("terminus_judge", "multichallenge", "verifif")
PROMPTS = Path(__file__).parent / "prompts"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeConfig(_Strict):
    base_url: Optional[str] = None
    model: str = "judge"
    api_key: Optional[str] = None
    max_concurrency: int = Field(64, ge=1)
    timeout: float = Field(120.0, gt=0)
    retries: int = Field(3, ge=0)
    backoff_base: float = Field(0.5, ge=0)
    backoff_max: float = Field(8.0, ge=0)

    def settings(self) -> JudgeSettings:
        return JudgeSettings(**self.model_dump())


class TerminusJudgeConfig(_Strict):
    """NeMo Gym's `TerminusJudgeResourcesServerConfig` knobs (judge server and sampling in `judge_params`)."""

    enable_string_similarity: bool = True
    string_similarity_threshold: float = 0.9
    enable_llm_judge: bool = False
    check_twice_swap: bool = False
    reward_if_swap_fails: float = 0.0
    judge_system_message: Optional[str] = None
    judge_prompt_template: Optional[str] = None  # inline; wins over the file
    judge_prompt_template_fpath: str = str(PROMPTS / "terminus_equivalence.txt")
    judge_equal_label: str = "[[A=B]]"
    judge_not_equal_label: str = "[[A!=B]]"
    judge_params: dict[str, Any] = Field(default_factory=dict)  # chat-completions sampling keys (max_tokens, ...)

    def prompt_template(self) -> str:
        if self.judge_prompt_template is not None:
            return self.judge_prompt_template.strip()
        path = Path(self.judge_prompt_template_fpath)
        if not path.is_absolute() and not path.exists():  # relative to the repo, wherever the server runs
            path = Path(__file__).resolve().parents[1] / path
        return path.read_text().strip()


MULTICHALLENGE_PROMPT = """You are evaluating whether a model's response meets a specific criterion.

CONVERSATION CONTEXT:
{context}

MODEL'S FINAL RESPONSE:
{response}

EVALUATION QUESTION:
{question}

EXPECTED ANSWER: {pass_criteria}

Does the model's response satisfy the criterion described in the evaluation question?
Analyze carefully, then respond with exactly [[YES]] or [[NO]] on the last line."""


class MultiChallengeConfig(_Strict):
    """NeMo Gym's `MultiChallengeConfig` (class defaults)."""

    aggregation_mode: Literal["mean", "min", "max", "all", "any", "weighted"] = "mean"
    parallel_evaluation: bool = True
    judge_prompt_template: str = MULTICHALLENGE_PROMPT
    judge_system_message: Optional[str] = (
        "You are a precise evaluator. Assess responses objectively based on the given criteria.")
    yes_label: str = "[[YES]]"
    no_label: str = "[[NO]]"
    judge_params: dict[str, Any] = Field(default_factory=dict)


VERIFIF_JUDGE_PROMPT = """
You are an impartial LLM-Judge. Evaluate the model response based strictly on the specific question provided below.

QUESTION TO EVALUATE AGAINST:
{question}

MODEL RESPONSE TO EVALUATE:
{model_response}

Does the model's response satisfy the criterion described in the evaluation question?
Analyze carefully, then respond with exactly [[YES]] or [[NO]] on the last line.
"""


class VerifIFConfig(_Strict):
    """NeMo Gym's `TuringVIFResourcesServerConfig` (sampling: judge_temperature/top_p/max_tokens)."""

    aggregation_mode: Literal["all", "any", "mean", "min", "max"] = "all"
    judge_temperature: float = 0.7
    judge_top_p: float = 0.8
    judge_max_tokens: int = 10_000
    judge_max_system_chars: Optional[int] = 200_000
    judge_max_user_chars: Optional[int] = 100_000
    judge_max_output_chars: Optional[int] = 50_000
    judge_question_prompt: str = VERIFIF_JUDGE_PROMPT


class ServerConfig(_Strict):
    environment: Optional[Literal["terminus_judge", "multichallenge", "verifif"]] = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    auth_token: Optional[str] = None
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    log_level: str = "info"
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    terminus_judge: TerminusJudgeConfig = Field(default_factory=TerminusJudgeConfig)
    multichallenge: MultiChallengeConfig = Field(default_factory=MultiChallengeConfig)
    verifif: VerifIFConfig = Field(default_factory=VerifIFConfig)

    @model_validator(mode="after")
    def _prompts_format(self):
        checks = [("multichallenge.judge_prompt_template", self.multichallenge.judge_prompt_template,
                   ("context", "response", "question", "pass_criteria")),
                  ("verifif.judge_question_prompt", self.verifif.judge_question_prompt, ("question", "model_response"))]
        if self.environment in (None, "terminus_judge") and self.terminus_judge.enable_llm_judge:
            try:
                checks.append(("terminus_judge judge prompt", self.terminus_judge.prompt_template(),
                               ("expected_answer", "generated_answer")))
            except OSError as err:
                raise ValueError(f"terminus_judge.judge_prompt_template_fpath: {err}") from None
        for where, template, keys in checks:
            try:
                template.format(**{k: "" for k in keys})
            except (KeyError, IndexError, ValueError) as err:
                raise ValueError(f"{where}: str.format fails ({type(err).__name__}: {err}); placeholders are "
                                 f"{', '.join('{' + k + '}' for k in keys)}, literal braces are written {{{{ }}}}")
        return self

    def environments(self) -> tuple[str, ...]:
        return (self.environment,) if self.environment else ENVIRONMENTS


class ConfigError(ValueError):
    """A config file or flag the server cannot run with (one line, for the command line)."""


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> ServerConfig:
    """Read `path` (YAML) and apply `overrides` (dotted keys such as `judge.base_url`; None values are skipped)."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"--config {path}: no such file (reward configs live in configs/rewards/)")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of keys")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    try:
        return ServerConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        source = f"{path}: " if path else ""
        raise ConfigError(f"{source}{where}: {first['msg']}") from None
