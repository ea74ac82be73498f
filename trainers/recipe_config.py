"""Config parsing for the recipes: TRL's parser, an embedded default config, and one clear line on user errors.
Runs in: the training venv, in every recipe; `python -m trainers.recipe_config CONFIG KEY` prints one key (launchers).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import yaml

from common.errors import ConfigError, UserError

DEFAULT_SFT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "sft" / "tiny.yaml"  # the embedded default


def parse_config(dataclass_types, default_config: Path, argv: list[str] | None = None):
    """`TrlParser.parse_args_and_config`, with `default_config` standing in when no --config is given."""
    from trl import TrlParser

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in argv:
        argv = ["--config", str(default_config)] + argv
    config_path = argv[argv.index("--config") + 1]
    if not Path(config_path).is_file():
        raise ConfigError(f"--config {config_path}: no such file (configs live in configs/sft/ and configs/grpo/)")
    try:
        return TrlParser(dataclass_types).parse_args_and_config(argv)
    except yaml.YAMLError as err:
        raise ConfigError(f"{config_path}: not valid YAML ({str(err).splitlines()[0]})") from None
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{config_path}: {err}") from None


def exit_on_user_error(main):
    """Run `main`; a config or corpus error ends the process with one message and exit code 2."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    return wrapper


def config_value(config: str | Path, key: str):
    """One top-level key of a YAML config (what a launcher needs before the recipe starts); ConfigError if absent."""
    try:
        data = yaml.safe_load(Path(config).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{config}: cannot be read as YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict) or key not in data:
        raise ConfigError(f"{config}: no key {key!r}")
    return data[key]


def main(argv: list[str] | None = None) -> int:
    """`python -m trainers.recipe_config CONFIG KEY`: print the key's value (the launchers' way to read a config)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m trainers.recipe_config", description=main.__doc__)
    parser.add_argument("config")
    parser.add_argument("key")
    args = parser.parse_args(argv)
    try:
        print(config_value(args.config, args.key))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
