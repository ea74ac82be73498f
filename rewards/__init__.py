"""The reward server (`python -m rewards.server`): NeMo Gym's `/verify` protocol over FastAPI, one module per
environment in rewards/environments/.

Runs in the training venv (.venv, Python >= 3.11), or in any Python with FastAPI, pydantic and httpx on a CPU node
of its own: it imports neither torch nor the trainers.
"""
