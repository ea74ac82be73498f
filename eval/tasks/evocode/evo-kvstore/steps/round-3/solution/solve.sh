#!/bin/bash
set -euo pipefail
cat > "${APP_DIR:-/app}/kv.py" <<'PY'
#!/usr/bin/env python3
"""kv: a tiny key-value store CLI with TTLs, case-insensitive keys and counters.

Store format: {"key": {"v": value, "exp": expiry-epoch-or-null}}
"""
import json
import os
import sys
import time

USAGE = ("usage: kv.py set KEY VALUE [--ttl SECONDS] | get KEY | del KEY | list [--prefix P] | count"
         " | incr KEY [N]")


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
    out = {}
    for k, e in raw.items():
        if e.get("exp") is None or t < e["exp"]:
            out[k.lower()] = e
    return out


def save(data):
    tmp = path() + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path())


def main(argv):
    cmd, args = (argv[0], argv[1:]) if argv else (None, [])
    data = load()
    key = args[0].lower() if args else None
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
        data[key] = {"v": args[1], "exp": exp}
        save(data)
        return 0
    if cmd == "get" and len(args) == 1:
        print(data[key]["v"] if key in data else "(nil)")
        return 0
    if cmd == "del" and len(args) == 1:
        if key not in data:
            return 1
        del data[key]
        save(data)
        return 0
    if cmd == "list" and (not args or (len(args) == 2 and args[0] == "--prefix")):
        prefix = args[1].lower() if args else ""
        for k in sorted(data):
            if k.startswith(prefix):
                print(f"{k}={data[k]['v']}")
        return 0
    if cmd == "count" and not args:
        print(len(data))
        return 0
    if cmd == "incr" and len(args) in (1, 2):
        try:
            n = int(args[1]) if len(args) == 2 else 1
        except ValueError:
            print(USAGE, file=sys.stderr)
            return 2
        entry = data.get(key, {"v": "0", "exp": None})
        try:
            value = int(entry["v"]) + n
        except ValueError:
            print(f"kv: value of {key!r} is not an integer", file=sys.stderr)
            return 1
        data[key] = {"v": str(value), "exp": entry["exp"]}
        save(data)
        print(value)
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
