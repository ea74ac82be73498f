#!/usr/bin/env python3
"""invoice: totals for a CSV of line items (work in progress)."""
import sys

if __name__ == "__main__":
    sys.exit("invoice: not implemented yet")
