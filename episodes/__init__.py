"""Episodes in sandboxes: in process (local; terminus: Terminus-2's harness), on an episode server (remote), the server.
Runs in: the training venv (.venv, Python >= 3.11): FastAPI, uvicorn, httpx and the standard-library sandbox; no torch.

The wire constants below are the server's endpoints (episodes/app.py) and what its client calls (episodes/remote.py).
"""

from common.harnesses import BASH_TOOL_HARNESS, HARNESSES, TERMINUS_2_HARNESS

TOKEN_ENV = "EPISODE_SERVER_TOKEN"  # the bearer token, when not given as --auth_token / sandbox_auth_token
# the wire: the server's endpoints (episodes/app.py) and what the client calls (episodes/remote.py)
SEED_SESSION, VERIFY, CLOSE_SESSION, KEEPALIVE, HEALTH = (
    "/seed_session", "/verify", "/close_session", "/keepalive", "/health")
# the calls that act in a session, by its harness (/seed_session's "harness"): common/harnesses.py's episode_calls
(BASH,) = HARNESSES[BASH_TOOL_HARNESS].episode_calls
TERMINUS_FIRST, TERMINUS_STEP = HARNESSES[TERMINUS_2_HARNESS].episode_calls  # a Terminus-2 session's turns

__all__ = ["BASH", "CLOSE_SESSION", "HEALTH", "KEEPALIVE", "SEED_SESSION", "TERMINUS_FIRST", "TERMINUS_STEP",
           "TOKEN_ENV", "VERIFY"]
