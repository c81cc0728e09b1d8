/* spin T: a busy loop in user mode for T seconds of CPU time (default 1), taking about HZ timer
 * interrupts per second on a periodic-tick or NO_HZ_IDLE kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    double end = cpu_seconds() + seconds;
    volatile unsigned long spins = 0;
    while (cpu_seconds() < end)
        for (int i = 0; i < 100000; i++)
            spins++;
    return 0;
}
