/* Single-core memcpy bandwidth (bytes copied per second) for a buffer far larger than the
 * caches: the physical limit a one-rank-per-core shared-memory collective works against. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  size_t bytes = (argc > 1 ? strtoull(argv[1], 0, 10) : 256) << 20;
  char* a = malloc(bytes);
  char* b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 0;
  for (int i = 0; i < 10; ++i) {
    double t = now();
    memcpy(b, a, bytes);
    t = now() - t;
    if (bytes / t > best) best = bytes / t;
    a[i] = (char)i;
  }
  printf("%.2f\n", best / 1e9);
  return b[1] == 0;
}
