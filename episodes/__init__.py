"""The episode server (`python -m episodes.server`): agentic GRPO's sandboxes on CPU nodes apart from the GPU
trainers, NeMo Gym style (seed a session, call its tool, verify, close). Each session is one
`episodes.local.TaskEnvironment` episode, so the rewards, limits and failure kinds are the trainer's own;
the trainer side is `episodes.remote.RemoteTaskEnvironment` (config key `sandbox_urls`).

Runs in the training venv (.venv, Python >= 3.11): FastAPI, uvicorn and the standard-library sandbox core; it
imports no torch.
"""

TOKEN_ENV = "EPISODE_SERVER_TOKEN"  # the bearer token, when not given as --auth_token / sandbox_auth_token
# the wire: the server's endpoints (episodes/app.py) and what the client calls (episodes/remote.py)
SEED_SESSION, BASH, VERIFY, CLOSE_SESSION, KEEPALIVE, HEALTH = (
    "/seed_session", "/bash", "/verify", "/close_session", "/keepalive", "/health")

__all__ = ["BASH", "CLOSE_SESSION", "HEALTH", "KEEPALIVE", "SEED_SESSION", "TOKEN_ENV", "VERIFY"]
