"""Errors a user can cause and fix. Commands print the message as one line and exit 2; servers answer 4xx.
Runs in: the training venv (standard library only); every command and server of the repo raises them.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad config, bad corpus, bad argument; the message names the file, line or key, and the fix."""


class ConfigError(UserError):
    """A config file, flag or command line that cannot run (recipes, the reward server, evals)."""


class CorpusError(UserError):
    """A corpus that cannot be trained on as configured."""


class RequestError(UserError):
    """A request a server refuses: `status` (a 4xx), the message, and the `param` (field) at fault, if one."""

    def __init__(self, message: str, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.message, self.status, self.param = message, status, param
