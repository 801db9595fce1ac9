#!/usr/bin/env bash
# Open MPI (Debian's openmpi-bin + libopenmpi-dev) and a tiny MPI_Allreduce benchmark in C, the
# reference collbench's tcp backend is compared with in scripts/bench-collbench.sh.
# Idempotent; the benchmark binary is cached under ~/.cache/servbench/openmpi.
# Usage: openmpi.sh [start|stop]   (start prints `export VAR=...` lines; stop does nothing)
set -euo pipefail
action=${1:-start}
[ "$action" = stop ] && exit 0

cache=${SERVBENCH_CACHE:-$HOME/.cache/servbench}/openmpi
mkdir -p "$cache"

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "openmpi.sh: installing openmpi-bin libopenmpi-dev" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev ||
    { apt-get update -q && apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev; }; } >&2
fi

src=$cache/mpi_allreduce_bench.c
cat > "$src.new" <<'C'
/* MPI_Allreduce of float sums at one size: prints "bytes ranks mean_us busbw_gbps" from rank 0,
 * with nccl-tests' busbw factor 2(n-1)/n. Usage: mpi_allreduce_bench BYTES ITERS WARMUP MODE
 * (MODE pipelined: back-to-back ops; latency: a barrier before each op, mean of single ops). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long bytes = argc > 1 ? atol(argv[1]) : 8;
  int iters = argc > 2 ? atoi(argv[2]) : 20, warmup = argc > 3 ? atoi(argv[3]) : 5;
  int latency = argc > 4 && strcmp(argv[4], "latency") == 0;
  long count = bytes / 4 > 0 ? bytes / 4 : 1;
  float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
  for (long i = 0; i < count; i++) in[i] = (float)(i % 5 + rank % 4 + 1);
  for (int i = 0; i < warmup; i++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double total = 0, start = MPI_Wtime();
  for (int i = 0; i < iters; i++) {
    if (latency) { MPI_Barrier(MPI_COMM_WORLD); start = MPI_Wtime(); }
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (latency) total += MPI_Wtime() - start;
  }
  if (!latency) total = MPI_Wtime() - start;
  double us = total / iters * 1e6;
  if (rank == 0) printf("%ld %d %.3f %.4f\n", count * 4, n, us, count * 4.0 / (us * 1e-6) / 1e9 * 2.0 * (n - 1) / n);
  free(in); free(out);
  MPI_Finalize();
  return 0;
}
C
bin=$cache/mpi_allreduce_bench
if ! cmp -s "$src.new" "$src" || [ ! -x "$bin" ]; then
  mv "$src.new" "$src"
  mpicc -O2 -o "$bin" "$src" >&2
else
  rm -f "$src.new"
fi
echo "export SERVBENCH_MPI_ALLREDUCE=$bin"
echo "export SERVBENCH_MPIRUN=$(command -v mpirun)"
