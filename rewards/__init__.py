"""The reward server (`python -m rewards.server`): NeMo Gym's `/verify` protocol over FastAPI, and its GRPO client.
Runs in: the training venv (.venv, Python >= 3.11), or any Python with FastAPI, pydantic and httpx on a CPU node.

It imports neither torch nor the trainers. One module per environment in rewards/environments/. Endpoints,
environments and knobs: docs/reward-server.md.
"""

# the wire: the server's endpoints (rewards/app.py) and what its client calls (rewards/client.py)
VERIFY, SEED_SESSION, CLOSE_SESSION, HEALTH, METRICS = (
    "/verify", "/seed_session", "/close_session", "/health", "/metrics")
TOKEN_ENV = "REWARD_SERVER_TOKEN"  # the bearer token, when not given as --auth_token

__all__ = ["CLOSE_SESSION", "HEALTH", "METRICS", "SEED_SESSION", "TOKEN_ENV", "VERIFY"]
