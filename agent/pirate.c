/*
 * The Pirate of Cache Pirating (thesis Paper III, Section III.3.2): keeps a working set of P bytes resident
 * in the shared last-level cache by walking it linearly, one word per 64-byte line, always re-touching its
 * oldest line, as fast as it can.
 *
 *     pirate MAX_BYTES CONTROL_FILE
 *
 * CONTROL_FILE (made by agent/pirate.py, mapped shared by both) holds four 64-bit words:
 *   [0] size   working set in bytes, changed by the controller at any time (read once per pass)
 *   [1] passes completed walks over the working set
 *   [2] lines  lines touched in all (the Pirate's accesses: the denominator of its fetch ratio)
 *   [3] stop   non-zero: exit
 * The buffer is mapped once at MAX_BYTES, populated, and advised to use huge pages (fewer TLB misses, so the
 * Pirate's own misses are cache misses only).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define LINE 64

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: pirate MAX_BYTES CONTROL_FILE\n");
		return 2;
	}
	size_t max_bytes = strtoull(argv[1], NULL, 10);
	if (max_bytes < LINE) {
		fprintf(stderr, "pirate: MAX_BYTES must be at least %d\n", LINE);
		return 2;
	}
	int fd = open(argv[2], O_RDWR);
	if (fd < 0) {
		perror("pirate: control file");
		return 2;
	}
	volatile uint64_t *control = mmap(NULL, 4 * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (control == MAP_FAILED) {
		perror("pirate: mmap control");
		return 2;
	}
	char *buffer = mmap(NULL, max_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (buffer == MAP_FAILED) {
		perror("pirate: mmap buffer");
		return 2;
	}
	madvise(buffer, max_bytes, MADV_HUGEPAGE);
	for (size_t offset = 0; offset < max_bytes; offset += LINE)
		buffer[offset] = 1;

	uint64_t sum = 0;
	while (!control[3]) {
		size_t size = control[0];
		if (size > max_bytes)
			size = max_bytes;
		size_t lines = size / LINE;
		for (size_t line = 0; line < lines; line++)
			sum += *(volatile char *)(buffer + line * LINE);
		control[1]++;
		control[2] += lines;
		if (!lines)
			usleep(1000);
	}
	return (int)(sum & 0);
}
