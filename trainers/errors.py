"""Errors a user can cause and fix: the recipes print their message as one line and exit 2."""


class UserError(ValueError):
    """Bad config, bad corpus, bad argument; the message names the file, line or key, and the fix."""


class ConfigError(UserError):
    """A config or command line that cannot run."""


class CorpusError(UserError):
    """A corpus that cannot be trained on as configured."""
