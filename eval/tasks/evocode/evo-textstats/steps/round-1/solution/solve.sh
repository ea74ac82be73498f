#!/bin/bash
set -euo pipefail
cat > "${APP_DIR:-/app}/textstats.py" <<'PY'
#!/usr/bin/env python3
"""textstats: statistics about a text file. usage: textstats.py FILE"""
import sys


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8", newline="") as f:
            text = f.read()
    except OSError as exc:
        print(f"textstats: {exc}", file=sys.stderr)
        return 1
    print(f"lines={len(text.splitlines())} words={len(text.split())} chars={len(text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
