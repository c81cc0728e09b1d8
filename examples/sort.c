/* sort N: qsort N pseudo-random 32-bit integers (a cache workload of the memory-model benchmarks). */
#include <stdio.h>
#include <stdlib.h>

static int compare(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    if (n < 1) {
        fprintf(stderr, "sort: N must be at least 1\n");
        return 2;
    }
    unsigned *values = malloc(n * sizeof *values);
    if (!values) {
        perror("sort");
        return 1;
    }
    unsigned state = 12345;
    for (long i = 0; i < n; i++)
        values[i] = state = state * 1103515245u + 12345u;
    qsort(values, n, sizeof *values, compare);
    for (long i = 1; i < n; i++)
        if (values[i - 1] > values[i])
            return 1;
    return 0;
}
