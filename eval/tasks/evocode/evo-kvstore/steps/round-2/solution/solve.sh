#!/bin/bash
set -euo pipefail
cat > "${APP_DIR:-/app}/kv.py" <<'PY'
#!/usr/bin/env python3
"""kv: a tiny key-value store CLI with TTLs.

Store format: {"key": {"v": value, "exp": expiry-epoch-or-null}}
"""
import json
import os
import sys
import time

USAGE = ("usage: kv.py set KEY VALUE [--ttl SECONDS] | get KEY | del KEY | list [--prefix P] | count")


def path():
    return os.environ.get("KV_FILE") or "kv.json"


def now():
    return float(os.environ["KV_NOW"]) if os.environ.get("KV_NOW") else time.time()


def load():
    try:
        with open(path()) as f:
            raw = json.load(f)
    except FileNotFoundError:
        return {}
    t = now()
    return {k: e for k, e in raw.items() if e.get("exp") is None or t < e["exp"]}


def save(data):
    tmp = path() + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path())


def main(argv):
    cmd, args = (argv[0], argv[1:]) if argv else (None, [])
    data = load()
    if cmd == "set" and len(args) in (2, 4) and (len(args) == 2 or args[2] == "--ttl"):
        exp = None
        if len(args) == 4:
            try:
                ttl = float(args[3])
            except ValueError:
                ttl = -1
            if ttl <= 0:
                print("kv: --ttl needs a positive number", file=sys.stderr)
                return 2
            exp = now() + ttl
        data[args[0]] = {"v": args[1], "exp": exp}
        save(data)
        return 0
    if cmd == "get" and len(args) == 1:
        if args[0] not in data:
            return 1
        print(data[args[0]]["v"])
        return 0
    if cmd == "del" and len(args) == 1:
        if args[0] not in data:
            return 1
        del data[args[0]]
        save(data)
        return 0
    if cmd == "list" and (not args or (len(args) == 2 and args[0] == "--prefix")):
        prefix = args[1] if args else ""
        for k in sorted(data):
            if k.startswith(prefix):
                print(f"{k}={data[k]['v']}")
        return 0
    if cmd == "count" and not args:
        print(len(data))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
