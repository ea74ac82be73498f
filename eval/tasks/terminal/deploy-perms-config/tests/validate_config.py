#!/usr/bin/env python3
"""Validate conf/app.ini. usage: validate_config.py CONFIG"""
import configparser
import os
import sys

REQUIRED = {
    "server": {"host": str, "listen_port": int, "log_level": str},
    "database": {"host": str, "port": int, "password_file": str},
}
LEVELS = {"debug", "info", "warning", "error"}


def main(path):
    cp = configparser.ConfigParser()
    if not cp.read(path):
        sys.exit(f"cannot read {path}")
    errors = []
    for section, keys in REQUIRED.items():
        if section not in cp:
            errors.append(f"missing section [{section}]")
            continue
        for key, typ in keys.items():
            if key not in cp[section]:
                errors.append(f"[{section}] missing key {key}")
            elif typ is int and not cp[section][key].isdigit():
                errors.append(f"[{section}] {key} must be an integer")
        for key in cp[section]:
            if key not in keys:
                errors.append(f"[{section}] unknown key {key}")
    if "server" in cp and cp["server"].get("log_level") not in LEVELS | {None}:
        errors.append(f"[server] log_level must be one of {sorted(LEVELS)}")
    pw = cp.get("database", "password_file", fallback=None)
    if pw and not os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(path)), "..", pw)):
        errors.append(f"[database] password_file {pw} does not exist")
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print("config ok")


if __name__ == "__main__":
    main(sys.argv[1])
