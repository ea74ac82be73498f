"""Helpers every training-venv package shares (trainers/, rewards/, episodes/, eval/): errors a user can cause,
loopback ports and health waits, checkpoint names, the HTTP servers' shared parts (asgi), percentiles. Runs in the
training venv (Python >= 3.11); not imported by sandbox/ (standard library only). One module is standard library
only and shared with the Harbor venv: `bash_harness.py`, the bash-tool harness that the agentic trainer and
harbor_plugins/bash_tool_agent.py must speak alike."""
