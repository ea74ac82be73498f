#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}"
# 1. recipes must start with a tab ("missing separator")
sed -i 's/^    /\t/' Makefile
# 2. libm: sqrt needs -lm at link time
grep -q '^LDLIBS' Makefile || sed -i 's/^OBJ = /LDLIBS = -lm\nOBJ = /' Makefile
sed -i 's/-o \$@ \$(OBJ)$/-o $@ $(OBJ) $(LDLIBS)/' Makefile
# 3. the header's prototypes disagree with the definitions (int vs size_t)
sed -i 's/double mean(const double \*xs, int n);/double mean(const double *xs, size_t n);/;
        s/double stddev(const double \*xs, int n);/double stddev(const double *xs, size_t n);/' src/stats.h
make clean && make && make test
