"""Plugins that Harbor loads by import path (``--env harbor_plugins.local_sandbox:LocalSandboxEnvironment``,
``-a harbor_plugins.bash_tool_agent:BashToolAgent``).

Runs in: the Harbor venv (.venv-harbor, Python >= 3.12), loaded by Harbor by import path; only code that
imports harbor lives here. The training venv never imports this package; what it shares with Harbor is standard
library only: the local sandbox itself (the package ``sandbox``) and the bash-tool harness (``common/bash_harness.py``).
"""
