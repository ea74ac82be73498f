import os
import tempfile
import unittest

from invtools import levels, low_stock, parse_file, parse_line
from invtools.parsing import Movement


class ParseTests(unittest.TestCase):
    def test_line(self):
        self.assertEqual(parse_line("a-1 +5"), Movement("A-1", 5))
        self.assertEqual(parse_line("b-2 -3  # returned"), Movement("B-2", -3))

    def test_blank_and_comment(self):
        self.assertIsNone(parse_line("   \n"))
        self.assertIsNone(parse_line("# header"))

    def test_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("# movements\nx 4\n\ny -1\nx +2\n")
        try:
            self.assertEqual(parse_file(f.name), [Movement("X", 4), Movement("Y", -1), Movement("X", 2)])
        finally:
            os.unlink(f.name)


class ReportTests(unittest.TestCase):
    def test_levels(self):
        ms = [Movement("B", 5), Movement("A", 1), Movement("B", -2)]
        self.assertEqual(levels(ms), {"A": 1, "B": 3})

    def test_low_stock(self):
        ms = [Movement("A", 50), Movement("B", 9), Movement("C", 2), Movement("D", 9)]
        self.assertEqual(low_stock(ms), ["C", "B", "D"])
        self.assertEqual(low_stock(ms, threshold=3), ["C"])


if __name__ == "__main__":
    unittest.main()
