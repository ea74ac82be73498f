#include <math.h>
#include <stdlib.h>
#include "stats.h"

double mean(const double *xs, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += xs[i];
    return n ? s / n : 0.0;
}

/* population standard deviation */
double stddev(const double *xs, size_t n) {
    double m = mean(xs, n), s = 0;
    for (size_t i = 0; i < n; i++) s += (xs[i] - m) * (xs[i] - m);
    return n ? sqrt(s / n) : 0.0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *xs, size_t n) {
    if (!n) return 0.0;
    qsort(xs, n, sizeof *xs, cmp);
    return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}
