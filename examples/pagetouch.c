/* pagetouch P: map P anonymous pages and write one byte to each, so the run takes at least P page faults
 * (one per first touch of a page; transparent huge pages are refused so each 4 KiB page faults once). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long pages = argc > 1 ? atol(argv[1]) : 1000;
    long page = sysconf(_SC_PAGESIZE);
    if (pages < 1) {
        fprintf(stderr, "pagetouch: P must be at least 1\n");
        return 2;
    }
    volatile char *area = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) {
        perror("pagetouch: mmap");
        return 1;
    }
    madvise((void *)area, pages * page, MADV_NOHUGEPAGE);
    for (long i = 0; i < pages; i++)
        area[i * page] = 1;
    return 0;
}
