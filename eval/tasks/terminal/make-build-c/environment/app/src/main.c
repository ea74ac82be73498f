#include <stdio.h>
#include <stdlib.h>
#include "stats.h"

int main(void) {
    size_t cap = 16, n = 0;
    double *xs = malloc(cap * sizeof *xs), x;
    if (!xs) return 1;
    while (scanf("%lf", &x) == 1) {
        if (n == cap) {
            cap *= 2;
            xs = realloc(xs, cap * sizeof *xs);
            if (!xs) return 1;
        }
        xs[n++] = x;
    }
    printf("n=%zu mean=%.3f stddev=%.3f median=%.3f\n", n, mean(xs, n), stddev(xs, n), median(xs, n));
    free(xs);
    return 0;
}
