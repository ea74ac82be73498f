"""Plugins that Harbor loads by import path (``--env harbor_plugins.local_sandbox:LocalSandboxEnvironment``).

Runs in: the Harbor venv (.venv-harbor, Python >= 3.12), loaded by Harbor by import path; only code that
imports harbor lives here. The training venv never imports this package; what it shares with Harbor
(the local sandbox itself) is the standard-library package ``sandbox``.
"""
