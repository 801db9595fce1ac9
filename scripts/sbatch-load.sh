#!/usr/bin/env bash
# An sbatch job that loads a server from every node of the allocation: srun starts one loadgen
# rank per task (loadgen reads SLURM_PROCID and SLURM_NTASKS), rank 0 on the first node
# listens on $PORT for the others. Every rank takes its share of each point (-c 256 over 4 ranks
# is 64 each; -r and -n split the same way), the points start on all ranks at the same instant,
# and every rank's records come out of rank 0: into the job's output file, each line whole,
# with each point's merged summary. A rank that dies fails the job, named.
#
# Usage:  URL=http://10.0.0.5:8000 sbatch --nodes=4 scripts/sbatch-load.sh -c 256 --duration 60s
#         summarize load-JOBID.jsonl
#
# Arguments are loadgen's. $URL is the server (required); $PORT where rank 0 listens (default
# 29500); $LOADGEN the loadgen binary (default: loadgen on PATH). One task per node by default;
# more with --ntasks-per-node.
#
#SBATCH --job-name=loadgen
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=01:00:00
#SBATCH --output=load-%j.jsonl
#SBATCH --error=load-%j.err
set -euo pipefail
: "${URL:?set URL to the server, e.g. URL=http://10.0.0.5:8000 sbatch $0 -c 64}"
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "sbatch-load: $SLURM_NTASKS rank(s), rank 0 on $first:${PORT:-29500}" >&2
srun "${LOADGEN:-loadgen}" --url "$URL" --coordinator "$first:${PORT:-29500}" "$@"
