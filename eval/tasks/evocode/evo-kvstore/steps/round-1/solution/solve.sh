#!/bin/bash
set -euo pipefail
cat > "${APP_DIR:-/app}/kv.py" <<'PY'
#!/usr/bin/env python3
"""kv: a tiny key-value store CLI."""
import json
import os
import sys

USAGE = "usage: kv.py set KEY VALUE | get KEY | del KEY"


def path():
    return os.environ.get("KV_FILE") or "kv.json"


def load():
    try:
        with open(path()) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def save(data):
    tmp = path() + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path())


def main(argv):
    cmd, args = (argv[0], argv[1:]) if argv else (None, [])
    data = load()
    if cmd == "set" and len(args) == 2:
        data[args[0]] = args[1]
        save(data)
        return 0
    if cmd == "get" and len(args) == 1:
        if args[0] not in data:
            return 1
        print(data[args[0]])
        return 0
    if cmd == "del" and len(args) == 1:
        if args[0] not in data:
            return 1
        del data[args[0]]
        save(data)
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
