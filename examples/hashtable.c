/* hashtable N LOOKUPS: insert N pseudo-random keys into an open-addressing table of 2N slots, then look up
 * LOOKUPS keys, half of them present (a cache workload of the memory-model benchmarks). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t next(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    long lookups = argc > 2 ? atol(argv[2]) : n;
    if (n < 1 || lookups < 0) {
        fprintf(stderr, "hashtable: N must be at least 1 and LOOKUPS not negative\n");
        return 2;
    }
    size_t slots = 1;
    while (slots < 2 * (size_t)n)
        slots <<= 1;
    uint64_t *table = calloc(slots, sizeof *table);
    if (!table) {
        perror("hashtable");
        return 1;
    }
    uint64_t state = 88172645463325252ull, found = 0;
    for (long i = 0; i < n; i++) {
        uint64_t key = next(&state) | 1;
        size_t slot = (key * 0x9E3779B97F4A7C15ull) & (slots - 1);
        while (table[slot] && table[slot] != key)
            slot = (slot + 1) & (slots - 1);
        table[slot] = key;
    }
    uint64_t replay = 88172645463325252ull;
    for (long i = 0; i < lookups; i++) {
        uint64_t key = (i % 2 ? next(&state) : next(&replay)) | 1;
        size_t slot = (key * 0x9E3779B97F4A7C15ull) & (slots - 1);
        while (table[slot] && table[slot] != key)
            slot = (slot + 1) & (slots - 1);
        found += table[slot] == key;
    }
    printf("%llu\n", (unsigned long long)found);
    return 0;
}
