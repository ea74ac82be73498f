"""Episodes in sandboxes: in process (local; terminus: Terminus-2's harness), on an episode server (remote), the server.
Runs in: the training venv (.venv, Python >= 3.11): FastAPI, uvicorn, httpx and the standard-library sandbox; no torch.

The wire constants below are the server's endpoints (episodes/app.py) and what its client calls (episodes/remote.py).
"""

TOKEN_ENV = "EPISODE_SERVER_TOKEN"  # the bearer token, when not given as --auth_token / sandbox_auth_token
# the wire: the server's endpoints (episodes/app.py) and what the client calls (episodes/remote.py)
SEED_SESSION, BASH, VERIFY, CLOSE_SESSION, KEEPALIVE, HEALTH = (
    "/seed_session", "/bash", "/verify", "/close_session", "/keepalive", "/health")
TERMINUS_FIRST, TERMINUS_STEP = "/terminus_first", "/terminus_step"  # a Terminus-2 session's turns
# a session's harness (/seed_session's "harness"), and the endpoints that act in it
HARNESS_CALLS = {"bash-tool": (BASH,), "terminus-2": (TERMINUS_FIRST, TERMINUS_STEP)}
HARNESSES = tuple(HARNESS_CALLS)

__all__ = ["BASH", "CLOSE_SESSION", "HARNESSES", "HARNESS_CALLS", "HEALTH", "KEEPALIVE", "SEED_SESSION",
           "TERMINUS_FIRST", "TERMINUS_STEP", "TOKEN_ENV", "VERIFY"]
