#!/usr/bin/env bash
# A throwaway OpenSSH server on 127.0.0.1 for the SSH tests of srv-launch and srv-kill.
#
# Usage:  eval "$(scripts/setup/sshd.sh start)"     # or just `scripts/setup/sshd.sh` (= start)
#         scripts/setup/sshd.sh stop
# Prints: export SERVBENCH_SSH_HOST=127.0.0.1
#         export SERVBENCH_SSH_PORT=PORT            (a free loopback port)
#         export SERVBENCH_SSH_USER=USER            (the current user)
#         export SERVBENCH_SSH_TARGET=USER@127.0.0.1:PORT
#         export SERVBENCH_SSH_KEY=DIR/id_ed25519   (authorized user key)
#         export SERVBENCH_SSH_IDENTITY=DIR/id_ed25519  (the same key, under the name the tools
#                                                   read for --identity)
#         export SERVBENCH_SSH_WRONG_KEY=DIR/id_wrong  (a key the server does not accept)
#         export SERVBENCH_SSH_KNOWN_HOSTS=DIR/known_hosts  (holds this server's host key)
# Installs openssh-server with apt-get when missing (the image's policy-rc.d keeps it from
# starting on :22), creates /run/sshd, and changes nothing else outside DIR
# (${SERVBENCH_SSHD_DIR:-/tmp/servbench-sshd}): a throwaway host key, user keys and config live
# there. Idempotent: a second `start` reuses a running server. Listens only on 127.0.0.1.
set -euo pipefail
action=${1:-start}
DIR=${SERVBENCH_SSHD_DIR:-/tmp/servbench-sshd}
say() { echo "sshd.sh: $*" >&2; }

stop() {
  if [ -f "$DIR/sshd.pid" ]; then
    kill "$(cat "$DIR/sshd.pid")" 2>/dev/null || true
    rm -f "$DIR/sshd.pid"
  fi
}

print_exports() {
  local port user
  port=$(cat "$DIR/port")
  user=$(id -un)
  echo "export SERVBENCH_SSH_HOST=127.0.0.1"
  echo "export SERVBENCH_SSH_PORT=$port"
  echo "export SERVBENCH_SSH_USER=$user"
  echo "export SERVBENCH_SSH_TARGET=$user@127.0.0.1:$port"
  echo "export SERVBENCH_SSH_KEY=$DIR/id_ed25519"
  echo "export SERVBENCH_SSH_IDENTITY=$DIR/id_ed25519"
  echo "export SERVBENCH_SSH_WRONG_KEY=$DIR/id_wrong"
  echo "export SERVBENCH_SSH_KNOWN_HOSTS=$DIR/known_hosts"
}

login_works() {
  ssh -q -i "$DIR/id_ed25519" -p "$(cat "$DIR/port")" -o BatchMode=yes \
      -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$DIR/known_hosts" \
      -o ConnectTimeout=3 "$(id -un)@127.0.0.1" true 2>/dev/null
}

case "$action" in
  stop) stop; exit 0 ;;
  start) ;;
  *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac

if [ -f "$DIR/sshd.pid" ] && kill -0 "$(cat "$DIR/sshd.pid")" 2>/dev/null && login_works; then
  print_exports
  exit 0
fi

if [ ! -x /usr/sbin/sshd ]; then
  say "installing openssh-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends openssh-server openssh-client >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && apt-get install -y -q --no-install-recommends openssh-server openssh-client >/dev/null; }
fi
mkdir -p /run/sshd && chmod 0755 /run/sshd
mkdir -p "$DIR" && chmod 0700 "$DIR"
[ -f "$DIR/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/host_ed25519" -C servbench-test-host
[ -f "$DIR/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/id_ed25519" -C servbench-test-user
[ -f "$DIR/id_wrong" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/id_wrong" -C servbench-test-unauthorized
cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys" && chmod 0600 "$DIR/authorized_keys"

stop
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "$port" > "$DIR/port"
echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$DIR/host_ed25519.pub")" > "$DIR/known_hosts"
user=$(id -un)
cat > "$DIR/sshd_config" <<CONF
Port $port
ListenAddress 127.0.0.1
HostKey $DIR/host_ed25519
PidFile $DIR/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers $user
UsePAM no
# the key files live under /tmp (a world-writable parent), which StrictModes rejects
StrictModes no
UseDNS no
PrintMotd no
PermitUserEnvironment no
MaxStartups 100:30:200
MaxSessions 50
LogLevel VERBOSE
CONF
/usr/sbin/sshd -t -f "$DIR/sshd_config"
/usr/sbin/sshd -f "$DIR/sshd_config" -E "$DIR/sshd.log"   # daemonizes, writes the PidFile
for _ in $(seq 100); do
  login_works && break
  sleep 0.1
done
login_works || { say "error: sshd on 127.0.0.1:$port does not accept the test key (log: $DIR/sshd.log)"; exit 1; }
say "sshd running on 127.0.0.1:$port (pid $(cat "$DIR/sshd.pid"), dir $DIR)"
print_exports
