#!/bin/bash
set -euo pipefail
cat > "${APP_DIR:-/app}/textstats.py" <<'PY'
#!/usr/bin/env python3
"""textstats: statistics about a text file. usage: textstats.py [--top K] [--json] FILE|-"""
import argparse
import json
import string
import sys
from collections import Counter


def words_of(text):
    out = []
    for tok in text.split():
        tok = tok.lower().strip(string.punctuation)
        if tok:
            out.append(tok)
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="textstats.py")
    ap.add_argument("file")
    ap.add_argument("--top", type=int)
    ap.add_argument("--json", action="store_true")
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
    words = words_of(text)
    stats = {"lines": len(text.splitlines()), "words": len(words), "chars": len(text)}
    top = None
    if args.top is not None:
        top = sorted(Counter(words).items(), key=lambda kv: (-kv[1], kv[0]))[: args.top]
    if args.json:
        if top is not None:
            stats["top"] = [list(t) for t in top]
        print(json.dumps(stats))
        return 0
    print(f"lines={stats['lines']} words={stats['words']} chars={stats['chars']}")
    if top is not None:
        print("top:")
        for word, n in top:
            print(f"{word} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
