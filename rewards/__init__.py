"""The reward server (`python -m rewards.server`): NeMo Gym's `/verify` protocol over FastAPI, and its GRPO client.
Runs in: the training venv (.venv, Python >= 3.11), or any Python with FastAPI, pydantic and httpx on a CPU node.

It imports neither torch nor the trainers. One module per environment in rewards/environments/. Endpoints,
environments and knobs: docs/reward-server.md.
"""
