"""Parse stock movement lines: `<sku> <+/-qty> [# comment]`."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Movement:
    sku: str
    qty: int


def parse_line(line):
    """Return a Movement, or None for blank and comment-only lines."""
    line = line.split("#", 1)[0].strip()
    if not line:
        return None
    sku, qty = line.split()
    return Movement(sku.upper(), int(qty))


def parse_file(path):
    with open(path) as f:
        return [m for m in map(parse_line, f) if m is not None]
