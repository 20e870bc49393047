/* The peer for bench/comm: OpenMPI's own collectives, timed the way `strata bench comm`
 * times its own (warm-up, barrier, K iterations, the slowest rank's mean), printing one JSON
 * object per size with the same keys (op, bytes, time_us, algbw, busbw, wrong=null).
 *   mpirun -n 2 mpi_peer allreduce|reducescatter|allgather|alltoall|broadcast|sendrecv MIN MAX FACTOR ITERS WARMUP
 * Sizes follow nccl-tests (see src/comm/benchmark.h). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run(const char* op, char* s, char* r, size_t block, size_t count, int n, int me) {
  if (!strcmp(op, "allreduce"))
    MPI_Allreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (!strcmp(op, "reducescatter"))
    MPI_Reduce_scatter_block(s, r, (int)block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (!strcmp(op, "allgather"))
    MPI_Allgather(s, (int)block, MPI_FLOAT, r, (int)block, MPI_FLOAT, MPI_COMM_WORLD);
  else if (!strcmp(op, "alltoall"))
    MPI_Alltoall(s, (int)block, MPI_FLOAT, r, (int)block, MPI_FLOAT, MPI_COMM_WORLD);
  else if (!strcmp(op, "broadcast"))
    MPI_Bcast(r, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
  else if (!strcmp(op, "sendrecv"))
    MPI_Sendrecv(s, (int)count, MPI_FLOAT, (me + 1) % n, 7, r, (int)count, MPI_FLOAT,
                 (me + n - 1) % n, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int n, me;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (argc < 7) {
    if (!me) fprintf(stderr, "usage: mpi_peer OP MIN MAX FACTOR ITERS WARMUP\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char* op = argv[1];
  size_t lo = strtoull(argv[2], 0, 10), hi = strtoull(argv[3], 0, 10), f = strtoull(argv[4], 0, 10);
  int iters = atoi(argv[5]), warmup = atoi(argv[6]);
  int per_rank = !strcmp(op, "reducescatter") || !strcmp(op, "allgather") || !strcmp(op, "alltoall");
  double factor = !strcmp(op, "allreduce") ? 2.0 * (n - 1) / n : per_rank ? (double)(n - 1) / n : 1.0;
  char* s = malloc(hi + 64);
  char* r = malloc(hi + 64);
  memset(s, 1, hi + 64);
  memset(r, 1, hi + 64);
  for (size_t bytes = lo; bytes <= hi; bytes *= f) {
    size_t block = per_rank ? bytes / 4 / n : bytes / 4;
    size_t count = per_rank ? block * n : block;
    if (count == 0) continue;
    for (int i = 0; i < warmup; ++i) run(op, s, r, block, count, n, me);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) run(op, s, r, block, count, n, me);
    double us = (MPI_Wtime() - t0) * 1e6 / iters, worst;
    MPI_Allreduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double algbw = (double)(count * 4) / (worst * 1e3);
    if (!me)
      printf("{\"op\":\"%s\",\"bytes\":%zu,\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":null}\n",
             op, count * 4, worst, algbw, algbw * factor);
    fflush(stdout);
  }
  free(s);
  free(r);
  MPI_Finalize();
  return 0;
}
