"""Build the compiled entry helper (sandbox/enter.c) for this host: ``python -m sandbox.build_enter``.
Runs in: any Python >= 3.11, standard library only, on the host (make setup runs it); prints the helper's path.
"""

from __future__ import annotations

import sys

from sandbox.entry import build


def main() -> None:
    try:
        print(build())
    except (RuntimeError, OSError) as exc:
        sys.exit(f"sandbox.build_enter: the compiled entry helper was not built ({exc}); commands will enter "
                 f"through sandbox/enter.py instead (about 30 ms more each)")


if __name__ == "__main__":
    main()
