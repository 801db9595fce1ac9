#!/usr/bin/env bash
# tmux, the pseudo-terminal the Ctrl-C tests type into (testkit::Tty): a pipeline in a terminal
# of its own, Ctrl-C sent as a user presses it (`tmux send-keys C-c`), so the signal reaches
# the pipeline's whole process group the way a real terminal sends it.
# Idempotent (Debian's tmux package).
# Usage: tmux.sh [start|stop]   (start prints `export VAR=...` lines; stop does nothing)
set -euo pipefail
action=${1:-start}
[ "$action" = stop ] && exit 0

if ! command -v tmux >/dev/null; then
  echo "tmux.sh: installing tmux" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -q --no-install-recommends tmux ||
    { apt-get update -q && apt-get install -y -q --no-install-recommends tmux; }; } >&2
fi
echo "export SERVBENCH_TMUX=$(command -v tmux)"
