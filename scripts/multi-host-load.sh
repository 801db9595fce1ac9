#!/usr/bin/env bash
# Load from several machines at once, when one client machine is not enough: runs
# `loadgen LOADGEN-ARGS` on every HOST over ssh as one job of ranks (host i is rank i, the first
# host is rank 0 and listens for the others on $PORT): each host takes its share of every point
# (-c 64 over 2 hosts is 32 each; -r, -n split the same way), the points start on all hosts at
# the same instant, and a host that dies or cannot be reached fails the job, named, rather
# than leaving a partial load. Each host's records are labelled host=HOST (and rank=i) and
# written to OUTDIR/HOST.jsonl as they arrive; the first host's file also holds the merged
# summary of each point. summarize then merges the hosts' records of each point exactly (`host`
# and `rank` are the labels it merges over by default). The split is loadgen's own, the same
# as under mpirun or srun (scripts/mpirun-load.sh, scripts/sbatch-load.sh).
#
# Usage:  scripts/multi-host-load.sh -o OUTDIR HOST[,HOST...] -- LOADGEN-ARGS...
#   e.g.  scripts/multi-host-load.sh -o runs client1,me@client2:2222 -- \
#           --url http://10.0.0.5:8000 -c 32,64 --duration 60s --max-tokens 256
#         summarize runs/*.jsonl
#
# HOST is [user@]addr[:port]. Each host runs `loadgen` from its PATH, or $LOADGEN (a path on the
# hosts). Options for ssh (-i KEY, -o UserKnownHostsFile=...) go in $SSH_OPTS; ssh runs in batch
# mode (no prompts). Rank 0 listens on the first host's addr at $PORT (default 29500), or at
# $COORDINATOR (HOST:PORT) when the others reach it by another name; a rank that cannot join
# within loadgen's --rank-timeout (default 120s) ends the job.
# Exit: 0 when every host's loadgen succeeded, else the first failing host's exit code, with every
# failing host named on stderr. Ctrl-C: the ssh sessions close; each remote loadgen sees its
# stdout's reader gone, stops sending and cancels its requests in flight at once, and every
# record written so far is in OUTDIR.
set -euo pipefail

usage() {
  echo "usage: $0 -o OUTDIR HOST[,HOST...] -- LOADGEN-ARGS..." >&2
  exit 2
}

outdir=""
while [ $# -gt 0 ]; do
  case $1 in
    -o) [ $# -ge 2 ] || usage; outdir=$2; shift 2 ;;
    --) usage ;;
    -*) echo "multi-host-load: error: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
if [ -z "$outdir" ] || [ $# -lt 2 ] || [ "$2" != "--" ]; then usage; fi
IFS=, read -r -a hosts <<< "$1"
shift 2
[ ${#hosts[@]} -gt 0 ] || usage
mkdir -p "$outdir"

# Rank 0 is the first host: the address it is reached at, without user and ssh port.
first=${hosts[0]#*@}
if [[ $first =~ ^(.*):[0-9]+$ ]]; then first=${BASH_REMATCH[1]}; fi
coordinator=${COORDINATOR:-$first:${PORT:-29500}}
# The remote command line: loadgen and its arguments, each quoted for the remote shell.
remote=$(printf '%q ' "${LOADGEN:-loadgen}" "$@")
# shellcheck disable=SC2206  # SSH_OPTS is a list of ssh options
ssh_opts=(-o BatchMode=yes ${SSH_OPTS:-})

pids=()
# Async commands ignore SIGINT in a script: on Ctrl-C (or TERM) end the ssh sessions ourselves,
# from the first one started.
trap 'kill "${pids[@]}" 2>/dev/null || true' INT TERM
for rank in "${!hosts[@]}"; do
  host=${hosts[$rank]}
  target=$host
  port_args=()
  if [[ $host =~ ^(.*):([0-9]+)$ ]]; then
    target=${BASH_REMATCH[1]}
    port_args=(-p "${BASH_REMATCH[2]}")
  fi
  out="$outdir/${host//[^A-Za-z0-9._@-]/_}.jsonl"
  echo "multi-host-load: $host -> $out" >&2
  ranks="--rank $rank --world ${#hosts[@]} --coordinator $(printf '%q' "$coordinator") --rank-output each"
  # stdin from /dev/null: loadgen on the host reads no server records from here. The command
  # line is built here on purpose, already quoted for the remote shell.
  # shellcheck disable=SC2029
  ssh "${ssh_opts[@]}" "${port_args[@]}" "$target" "$remote $ranks --label host=$(printf '%q' "$host")" \
    < /dev/null > "$out" &
  pids+=($!)
done

rc=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    continue
  else
    code=$?
    echo "multi-host-load: error: ${hosts[$i]}: loadgen or ssh failed with exit $code" >&2
    [ "$rc" -ne 0 ] || rc=$code
  fi
done
exit "$rc"
