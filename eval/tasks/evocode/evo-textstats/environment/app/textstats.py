#!/usr/bin/env python3
"""textstats: statistics about text files (work in progress)."""
import sys

if __name__ == "__main__":
    sys.exit("textstats: not implemented yet")
