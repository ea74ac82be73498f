#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}"
# the module was renamed parser.py -> parsing.py without updating the package's imports
sed -i 's/^from \.parser import/from .parsing import/' invtools/__init__.py
# low_stock sorts (sku, qty) tuples by a non-existent attribute, and must break ties by SKU
sed -i 's/key=lambda x: x.qty)/key=lambda x: (x[1], x[0]))/' invtools/report.py
./run_tests.sh
