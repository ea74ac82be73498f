#ifndef NUMSTAT_STATS_H
#define NUMSTAT_STATS_H
#include <stddef.h>

double mean(const double *xs, int n);
double stddev(const double *xs, int n);
double median(double *xs, size_t n);

#endif
