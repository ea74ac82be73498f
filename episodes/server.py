"""`python -m episodes.server`: the episode server on uvicorn (a CPU node's sandboxes for agentic GRPO).
Runs in: its own process, in the training venv (.venv, Python >= 3.11).

    python -m episodes.server --tasks DIR [DIR ...] [--host H] [--port 8200] [--max_sessions 32] [--lease_sec 120]
                              [--auth_token T] [--max_memory_mb 16384 ...]
Tasks go by folder name under --tasks; the trainer sends each task's digest and a copy that differs is refused.
A host other machines can reach needs a token (--auth_token or $EPISODE_SERVER_TOKEN); client limits are capped.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import fields
from pathlib import Path

from common.net import token_needed
from episodes import TOKEN_ENV
from episodes.app import EpisodeServerConfig
from episodes.local import WALL_GRACE_SEC
from episodes.sessions import LimitCaps

_CAPPED = {  # what each of a seed's limits is (episodes.local.EpisodeLimits), for --max_<key>'s help
    "command_timeout_sec": "seconds of one bash call", "episode_wall_sec": "seconds of a whole episode",
    "max_output_chars": "characters of one call's output returned", "memory_mb": "MiB of a sandbox's memory",
    "storage_mb": "MiB of a sandbox's writable storage"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2
        print(f"error: {message} (see python -m episodes.server --help)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m episodes.server", description=(
        "Episode server for agentic GRPO: each session is one episode of a Harbor task in a fresh local sandbox "
        "(episodes/local.py's TaskEnvironment, or episodes/terminus.py's TerminusEnvironment for a Terminus-2 "
        "session: the same tool output or messages, rewards, limits and failure kinds as in the trainer). POST "
        "/seed_session, /bash, /terminus_first, /terminus_step, /verify, /close_session, /keepalive; GET /health."))
    p.add_argument("--tasks", required=True, nargs="+", type=Path,
                   help="folders of Harbor task folders; a session names its task by folder name (first match)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; 0.0.0.0 for other nodes)")
    p.add_argument("--port", type=int, default=8200, help="port (default 8200)")
    p.add_argument("--max_sessions", type=int, default=32, help=(
        "live sessions (sandboxes) at most; beyond it /seed_session answers 429 and the trainer tries the next "
        "server (default 32)"))
    p.add_argument("--lease_sec", type=float, default=120.0, help=(
        "a session with no call (and no keepalive from its trainer) for this long is closed unverified and its "
        "sandbox torn down (default 120)"))
    p.add_argument("--auth_token", help=(
        f"require 'Authorization: Bearer TOKEN' (default: ${TOKEN_ENV}); needed unless --host is loopback"))
    for item in fields(LimitCaps):
        p.add_argument(LimitCaps.flag(item.name), type=type(item.default), default=item.default, help=(
            f"cap on a seed's limits.{item.name} ({_CAPPED[item.name]}): more is refused, 422 naming it "
            f"(default {item.default:g})"))
    p.add_argument("--wall_grace_sec", type=float, default=WALL_GRACE_SEC, help=(
        "a session ends this long after its episode_wall_sec, whatever its keepalives and calls (default "
        f"{WALL_GRACE_SEC:g}: as long as an in-process episode's sandbox outlives its wall)"))
    p.add_argument("--max_body_bytes", type=int, default=4 << 20, help="largest request body (default 4 MiB)")
    p.add_argument("--log_level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def resolve(argv: list[str] | None = None) -> EpisodeServerConfig:
    args = build_parser().parse_args(argv)
    missing = [str(root) for root in args.tasks if not root.is_dir()]
    if missing:
        raise SystemExit(_fail(f"--tasks: {', '.join(missing)} is not a folder (give folders of Harbor task folders)"))
    if args.max_sessions < 1 or args.lease_sec <= 0 or args.max_body_bytes < 1024:
        raise SystemExit(_fail("--max_sessions must be at least 1, --lease_sec positive, --max_body_bytes >= 1024"))
    caps = LimitCaps(**{item.name: getattr(args, LimitCaps.flag(item.name)[2:]) for item in fields(LimitCaps)})
    bad = [LimitCaps.flag(item.name) for item in fields(LimitCaps) if not getattr(caps, item.name) > 0]
    if bad or args.wall_grace_sec < 0:
        raise SystemExit(_fail(f"{', '.join(bad) or '--wall_grace_sec'} must be positive"))
    token = args.auth_token or os.environ.get(TOKEN_ENV) or None
    refused = token_needed(args.host, token, TOKEN_ENV, "runs the commands it is sent")
    if refused:
        raise SystemExit(_fail(refused))
    return EpisodeServerConfig(tasks=[root.resolve() for root in args.tasks], host=args.host, port=args.port,
                               max_sessions=args.max_sessions, lease_sec=args.lease_sec, auth_token=token,
                               max_body_bytes=args.max_body_bytes, log_level=args.log_level, caps=caps,
                               wall_grace_sec=args.wall_grace_sec)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> None:
    config = resolve(argv)
    import uvicorn

    from episodes.app import create_app

    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("episodes").info(
        "serving episodes of the tasks under %s on http://%s:%d (at most %d sessions, lease %g s; caps %s; auth: %s)",
        ", ".join(map(str, config.tasks)), config.host, config.port, config.max_sessions, config.lease_sec,
        ", ".join(f"{key} {value:g}" for key, value in vars(config.caps).items()),
        "bearer token" if config.auth_token else "none (loopback only)")
    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level=config.log_level,
                access_log=False, timeout_graceful_shutdown=30)


if __name__ == "__main__":
    main()
