"""invtools: parse stock movement files and report inventory levels."""
from .parser import parse_line, parse_file
from .report import levels, low_stock

__all__ = ["parse_line", "parse_file", "levels", "low_stock"]
