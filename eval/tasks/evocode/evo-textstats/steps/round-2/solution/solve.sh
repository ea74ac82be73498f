#!/bin/bash
set -euo pipefail
cat > "${APP_DIR:-/app}/textstats.py" <<'PY'
#!/usr/bin/env python3
"""textstats: statistics about a text file. usage: textstats.py [--top K] FILE|-"""
import argparse
import sys
from collections import Counter


def main(argv):
    ap = argparse.ArgumentParser(prog="textstats.py")
    ap.add_argument("file")
    ap.add_argument("--top", type=int)
    args = ap.parse_args(argv)
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8", newline="") as f:
                text = f.read()
    except OSError as exc:
        print(f"textstats: {exc}", file=sys.stderr)
        return 1
    words = text.split()
    print(f"lines={len(text.splitlines())} words={len(words)} chars={len(text)}")
    if args.top is not None:
        print("top:")
        for word, n in sorted(Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))[: args.top]:
            print(f"{word} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
