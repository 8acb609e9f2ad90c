#!/usr/bin/env bash
# System programs the test suite uses for real (Graphviz `dot`, Chromium for the UI's browser
# tests, a PostgreSQL server, PgBouncer in front of it for the connection-pooler tests).
# Installed from Debian's packages when missing and we are root; otherwise the tests that
# need them say why they skip (and fail under CI=true).
set -u
need=()
command -v dot >/dev/null 2>&1 || need+=(graphviz)
command -v chromium >/dev/null 2>&1 || [ -n "${STATECHARTS_CHROMIUM:-}" ] || need+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: installing ${need[*]}" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >/dev/null 2>&1 \
    || echo "system-deps: could not install ${need[*]}" >&2
fi
# PostgreSQL: start the machine's cluster if it is installed but stopped.
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ] && ! pg_isready -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start >/dev/null 2>&1 || true
fi
exit 0
