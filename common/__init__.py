"""Helpers every training-venv package shares (trainers/, rewards/, eval/): errors a user can cause, loopback
ports and health waits, checkpoint names. Runs in the training venv (Python >= 3.11); not imported by sandbox/
(standard library only) or harbor_plugins/ (the Harbor venv)."""
