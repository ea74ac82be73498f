"""Checkpoint evals: serve a checkpoint, run a Harbor job on a suite, score the job dir, write, log and compare results.
Runs in: the training venv (.venv, Python >= 3.11); it drives Harbor (.venv-harbor) as a command, never imports it.

serve.py and cpu_server.py serve (tool_calls.py: the CPU server's parser per family format); run.py (with
settings.py's options) runs the job; job_dir.py, metrics.py and score.py score it; results.py, wandb_log.py and
compare.py write, log and compare. The sandbox Harbor runs trials in is harbor_plugins/local_sandbox.py, which Harbor
imports. How to use it all: docs/evaluation.md.
"""
