/* work N: a fixed amount of deterministic work, N blocks of it (default 100), with the cost of a block a
 * build-time parameter: cc -DBLOCK_COST=110 makes every block 1.1 times the default's (100) instructions.
 * The history examples build it once per "commit" with a different cost, as a project whose code changes
 * at known commits (docs/history.md, tests/test_i32_history_e2e.py). */
#include <stdlib.h>

#ifndef BLOCK_COST
#define BLOCK_COST 100
#endif

int main(int argc, char **argv) {
    long blocks = argc > 1 ? atol(argv[1]) : 100;
    volatile unsigned long sink = 0;
    unsigned long x = 88172645463325252UL;
    for (long b = 0; b < blocks; b++)
        for (long i = 0; i < BLOCK_COST * 1000L; i++) {
            /* xorshift: every step depends on the last, so the compiler cannot fold the loop */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            sink += x;
        }
    return (int)(sink & 0);
}
