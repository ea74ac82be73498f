"""Helpers every training-venv package shares (trainers/, rewards/, episodes/, eval/): errors a user can cause,
loopback ports and health waits, checkpoint names, the HTTP servers' shared parts (asgi), percentiles. Runs in the
training venv (Python >= 3.11); not imported by sandbox/ (standard library only) or harbor_plugins/ (the Harbor
venv)."""
