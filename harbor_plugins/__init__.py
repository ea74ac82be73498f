"""Plugins that Harbor loads by import path: the local sandbox (``--env local``) and the bash-tool agent.
Runs in: the Harbor venv (.venv-harbor, Python >= 3.12), loaded by Harbor with this repo on ``PYTHONPATH``.

Only code that imports harbor lives here; the training venv never imports this package. What it shares with the
training side is standard library only: the package ``sandbox`` and ``common/bash_harness.py``.
"""
