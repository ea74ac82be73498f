"""Checkpoint evals: serve a checkpoint (serve.py, cpu_server.py), run a Harbor job on a suite (run.py, with
settings.py's options), score the job dir (job_dir.py, metrics.py, score.py), write and log the results
(results.py, wandb_log.py), compare runs (compare.py).

Runs in the training venv (.venv, Python >= 3.11), like trainers/. Harbor lives in its own venv (.venv-harbor,
Python 3.12): eval/ drives it as a command-line tool (`.venv-harbor/bin/harbor run ...`) and reads the job dirs
it writes; it never imports harbor. The local sandbox Harbor runs trials in is harbor_plugins/local_sandbox.py
(over sandbox/), which Harbor imports, not eval/.
"""
