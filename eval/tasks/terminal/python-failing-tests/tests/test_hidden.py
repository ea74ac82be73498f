import unittest

from invtools import levels, low_stock, parse_line
from invtools.parsing import Movement


class Hidden(unittest.TestCase):
    def test_more_low_stock(self):
        ms = [Movement("Z", 0), Movement("Y", -4), Movement("X", 3), Movement("W", 3), Movement("V", 100)]
        self.assertEqual(low_stock(ms, threshold=5), ["Y", "Z", "W", "X"])
        self.assertEqual(low_stock([]), [])

    def test_parse_upper(self):
        self.assertEqual(parse_line("  sku-9   -12 #x"), Movement("SKU-9", -12))

    def test_levels_empty(self):
        self.assertEqual(levels([]), {})
