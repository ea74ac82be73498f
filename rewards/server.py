"""`python -m rewards.server`: the reward server (NeMo Gym `/verify` protocol) on uvicorn.
Runs in: its own process: the training venv, or any Python >= 3.11 with FastAPI, pydantic, httpx and uvicorn.

    python -m rewards.server                                    # every environment, routed by agent_ref.name
    python -m rewards.server --config configs/rewards/terminus_judge_llm.yaml --judge_base_url http://judge:8000/v1
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from common.errors import ConfigError
from common.net import token_needed
from rewards import TOKEN_ENV
from rewards.config import ServerConfig, load_config
from rewards.environments import ENVIRONMENTS

CONFIG_ENV = "REWARDS_SERVER_CONFIG_JSON"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2
        print(f"error: {message} (see python -m rewards.server --help)", file=sys.stderr)
        sys.exit(2)


def _and(names) -> str:
    names = list(names)
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m rewards.server", description=(
        "Reward server speaking NeMo Gym's resources-server protocol (POST /verify, /seed_session, /close_session; "
        f"GET /health, /metrics) for the {_and(ENVIRONMENTS)} environments. Without --config "
        "it serves every environment, routed by agent_ref.name, with terminus_judge in string-only mode."))
    p.add_argument("--config", help="YAML config (configs/rewards/*.yaml); flags below override it")
    p.add_argument("--environment", choices=list(ENVIRONMENTS),
                   help="serve only this environment (rows need no agent_ref)")
    p.add_argument("--host", help="bind address (default 127.0.0.1; any other needs a token: --auth_token)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--judge_base_url", help="OpenAI-compatible judge server, ending in /v1")
    p.add_argument("--judge_model", help="model name sent to the judge")
    p.add_argument("--judge_api_key", help="bearer key for the judge (default: $JUDGE_API_KEY)")
    p.add_argument("--judge_max_concurrency", type=int, help="judge calls in flight at most (default 64)")
    p.add_argument("--judge_timeout", type=float, help="seconds per judge call attempt (default 120)")
    p.add_argument("--judge_retries", type=int, help="retries on connection errors, 5xx and 429 (default 3)")
    p.add_argument("--verify_timeout", type=float, help=(
        "seconds per /verify, end to end: judge slot waits, attempts, retries and backoff; past it the sample "
        "is masked, failure_kind judge_failed (default 180)"))
    p.add_argument("--auth_token", help=(
        f"require 'Authorization: Bearer TOKEN' (default: ${TOKEN_ENV}); needed unless --host is loopback"))
    p.add_argument("--max_body_bytes", type=int, help="largest request body accepted (default 32 MiB)")
    p.add_argument("--read_timeout", type=float, help=(
        "seconds a client has to send a whole request, headers and body; then it is closed (default 30)"))
    p.add_argument("--max_connections", type=int, help=(
        "open connections at most, per worker; past it 503 (default: the open-file limit less a reserve)"))
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    p.add_argument("--log_level", default=None, choices=["critical", "error", "warning", "info", "debug"])
    return p


def resolve(argv: list[str] | None = None) -> tuple[ServerConfig, int]:
    args = build_parser().parse_args(argv)
    overrides = {
        "environment": args.environment, "host": args.host, "port": args.port,
        "judge.base_url": args.judge_base_url, "judge.model": args.judge_model,
        "judge.api_key": args.judge_api_key or os.environ.get("JUDGE_API_KEY"),
        "judge.max_concurrency": args.judge_max_concurrency, "judge.timeout": args.judge_timeout,
        "judge.retries": args.judge_retries, "verify_timeout": args.verify_timeout,
        "auth_token": args.auth_token or os.environ.get(TOKEN_ENV),
        "max_body_bytes": args.max_body_bytes, "log_level": args.log_level,
        "read_timeout": args.read_timeout, "max_connections": args.max_connections,
    }
    config = load_config(args.config, overrides)
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    refused = token_needed(config.host, config.auth_token, TOKEN_ENV, "scores what it is sent and calls its judge")
    if refused:
        raise ConfigError(refused)
    if config.judge.base_url is None:
        served = {name: config.environment_config(name) for name in config.environments()}
        if config.environment is not None and served[config.environment].needs_judge:
            raise ConfigError(f"{config.environment} needs an LLM judge: pass --judge_base_url URL "
                              "(an OpenAI-compatible server, ending in /v1) or set judge.base_url in the config")
        for name, env_config in served.items():  # a judge switched on in the config must have a judge
            if env_config.judge_switch is not None and env_config.needs_judge:
                raise ConfigError(f"{name}.{env_config.judge_switch} is on but no judge is set: "
                                  "pass --judge_base_url URL")
    return config, args.workers


def uvicorn_options(config: ServerConfig) -> dict:
    """uvicorn keyword arguments for this config: the guarded h11 protocol (read deadlines, connection cap)."""
    from rewards.connections import uvicorn_options as options

    return options(config.max_connections)


def app_from_env():
    """uvicorn factory for --workers > 1: the resolved config travels in an environment variable."""
    from rewards.app import create_app

    return create_app(ServerConfig.model_validate(json.loads(os.environ[CONFIG_ENV])))


def main(argv: list[str] | None = None) -> None:
    try:
        config, workers = resolve(argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    import uvicorn

    from rewards.connections import raise_open_file_limit

    raise_open_file_limit()  # before the app derives max_connections from it
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("rewards")
    served = ", ".join(config.environments())
    log.info("serving %s on http://%s:%d (judge: %s; auth: %s)", served, config.host, config.port,
             config.judge.base_url or "none", "bearer token" if config.auth_token else "none")
    unjudged = [name for name in config.environments() if config.environment_config(name).needs_judge]
    if config.judge.base_url is None and unjudged:
        log.warning("no judge configured: %s rows that need one come back masked "
                    "(failure_kind judge_failed); pass --judge_base_url to score them", _and(unjudged))
    common = dict(host=config.host, port=config.port, log_level=config.log_level, access_log=False,
                  **uvicorn_options(config))
    if workers > 1:
        os.environ[CONFIG_ENV] = config.model_dump_json()
        uvicorn.run("rewards.server:app_from_env", factory=True, workers=workers, **common)
    else:
        from rewards.app import create_app

        uvicorn.run(create_app(config), **common)


if __name__ == "__main__":
    main()
