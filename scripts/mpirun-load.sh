#!/usr/bin/env bash
# Load from several machines under Open MPI's mpirun: one loadgen rank per slot of HOSTS, rank 0
# on the first host listening on $PORT for the others. Every rank takes its share of each point
# (-c 256 over 4 ranks is 64 each; -r and -n split the same way), the points start on all ranks
# at the same instant, and every rank's records come out of rank 0 (here, on stdout), each
# line whole, with each point's merged summary. A rank that dies fails the job, named.
#
# Usage:  scripts/mpirun-load.sh HOST[:SLOTS][,HOST[:SLOTS]...] -- LOADGEN-ARGS...
#   e.g.  scripts/mpirun-load.sh client1,client2,client3 -- \
#           --url http://10.0.0.5:8000 -c 256 --duration 60s --max-tokens 256 | summarize
#
# The line it runs, to copy (3 hosts, one rank each):
#   mpirun --host client1,client2,client3 -np 3 loadgen --coordinator client1:29500 \
#     --url http://10.0.0.5:8000 -c 256 --duration 60s --max-tokens 256 | summarize
#
# loadgen must be on every host's PATH, or at $LOADGEN (the same path on every host). Rank 0
# listens on the first host's name at $PORT (default 29500), or at $COORDINATOR (HOST:PORT)
# when the others reach it by another name. $MPIRUN_ARGS go to mpirun as they are (e.g.
# `--mca btl_tcp_if_include eth0`, or `--oversubscribe` for more ranks than cores).
set -euo pipefail

usage() {
  echo "usage: $0 HOST[:SLOTS][,HOST[:SLOTS]...] -- LOADGEN-ARGS..." >&2
  exit 2
}
if [ $# -lt 2 ] || [ "$2" != "--" ]; then usage; fi
hosts=$1
shift 2
np=0
IFS=, read -r -a list <<< "$hosts"
[ ${#list[@]} -gt 0 ] || usage
for h in "${list[@]}"; do
  if [[ $h =~ :([0-9]+)$ ]]; then np=$((np + BASH_REMATCH[1])); else np=$((np + 1)); fi
done
first=${list[0]%%:*}
coordinator=${COORDINATOR:-$first:${PORT:-29500}}
# shellcheck disable=SC2206  # MPIRUN_ARGS is a list of mpirun options
extra=(${MPIRUN_ARGS:-})
echo "mpirun-load: $np rank(s) on $hosts, rank 0 listening at $coordinator" >&2
exec mpirun --host "$hosts" -np "$np" "${extra[@]}" "${LOADGEN:-loadgen}" --coordinator "$coordinator" "$@"
