#!/usr/bin/env python3
"""kv: a tiny key-value store CLI (work in progress)."""
import sys


def main(argv):
    print("kv: not implemented yet", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
