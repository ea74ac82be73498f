"""Reward server configuration: one YAML file (configs/rewards/*.yaml), overridden by command-line flags.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

`ServerConfig` is built from the registry (rewards/environments/__init__.py): a block and an `environment` choice
per registered environment. The keys: docs/reward-server.md#the-config-file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from common.errors import ConfigError
from rewards.environments import ENVIRONMENTS, EnvironmentConfig
from rewards.judge import JudgeConfig

__all__ = ["ConfigError", "JudgeConfig", "ServerConfig", "load_config"]


class _ServerFields(BaseModel):
    """The settings of the server itself; `ServerConfig` adds `environment` and one block per environment."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    auth_token: Optional[str] = None
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    # one deadline per /verify (judge slot waits, attempts, retries, backoff); past it the sample is masked
    # (judge_failed), as NeMo Gym's judge_failsafe. /health says it, and the GRPO client derives its timeout from it.
    verify_timeout: float = Field(180.0, gt=0)
    # seconds a client has to send a whole request (headers and body), from its connection or its previous
    # response; past it the connection is closed (half-sent requests held file descriptors forever)
    read_timeout: float = Field(30.0, gt=0)
    # open connections at most; past it a connection gets 503 and is closed. None: the open-file limit less the
    # judge's connections and a reserve (rewards/connections.py)
    max_connections: Optional[int] = Field(None, ge=1)
    log_level: str = "info"
    judge: JudgeConfig = Field(default_factory=JudgeConfig)

    @model_validator(mode="after")
    def _prompts_format(self):
        for name in self.environments():
            for where, template, keys in self.environment_config(name).prompt_templates():
                try:
                    template.format(**{k: "" for k in keys})
                except (KeyError, IndexError, ValueError) as err:
                    raise ValueError(f"{where}: str.format fails ({type(err).__name__}: {err}); placeholders are "
                                     f"{', '.join('{' + k + '}' for k in keys)}, literal braces are written "
                                     "{{ }}")
        return self

    def environments(self) -> tuple[str, ...]:
        """The environments this server serves: the pinned one, or every registered one."""
        return (self.environment,) if self.environment else tuple(ENVIRONMENTS)

    def environment_config(self, name: str) -> EnvironmentConfig:
        return getattr(self, name)


_clash = set(ENVIRONMENTS) & (set(_ServerFields.model_fields) | {"environment"})
if _clash:
    raise RuntimeError(f"environment names clash with server config keys: {', '.join(sorted(_clash))}")

ServerConfig = create_model(
    "ServerConfig", __base__=_ServerFields, __module__=__name__,
    environment=(Optional[Literal[tuple(ENVIRONMENTS)]], None),
    **{name: (cls.config_model, Field(default_factory=cls.config_model)) for name, cls in ENVIRONMENTS.items()})
ServerConfig.__doc__ = "The reward server's config: `_ServerFields`, `environment`, and one block per environment."


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
