#!/usr/bin/env bash
# `npm test`'s first step (the `pretest` script): finds what the tests need, installs it when it can (root on Debian),
# and otherwise stops at once with one line that says the one command to run. What the tests need:
#   - Debian's chromium (the dashboard's browser tests; OUTLAST_CHROMIUM names another executable)
#   - PostgreSQL on 127.0.0.1:5432, user postgres with trust auth, database `test` (OUTLAST_TEST_PG names another),
#     and the server binaries under /usr/lib/postgresql (the restart test starts a private cluster with them)
#   - faketime (the clock tests; OUTLAST_FAKETIME names another executable)
set -uo pipefail
cd "${OUTLAST_ROOT:-.}" || exit 1

chromium=${OUTLAST_CHROMIUM:-/usr/bin/chromium}
faketime=${OUTLAST_FAKETIME:-faketime}
pg_url=${OUTLAST_TEST_PG:-postgres://postgres@127.0.0.1:5432/test}

fail() {
  echo "npm test needs $1" >&2
  exit 1
}
# Root with apt-get: installs the Debian packages named, quietly; says what it did.
can_apt() { [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; }
updated=""
apt_install() {
  echo "npm test: installing $* with apt-get (once)" >&2
  if [[ -z $updated ]]; then
    apt-get update -qq >/dev/null 2>&1 || return 1
    updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}
listening() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# The published MCP JSON schemas every server message is checked against (test/helpers.ts reads them beside the checkout).
if ! compgen -G '../shared/schemas/*.schema.json' >/dev/null; then
  fail "the published MCP JSON schemas in shared/schemas beside this checkout (CI lays the team's shared/ folder there)"
fi

# Chromium, driven by playwright-core, which never downloads a browser of its own.
if [[ ! -x $chromium ]]; then
  if [[ $chromium == /usr/bin/chromium ]] && can_apt; then
    apt_install chromium || fail "Debian's chromium and apt-get could not install it: run \`apt-get update && apt-get install -y chromium\`"
  fi
  [[ -x $chromium ]] || fail "Debian's chromium at $chromium: run \`sudo apt-get install -y chromium\` (or set OUTLAST_CHROMIUM to a Chromium executable)"
fi

# faketime (libfaketime), for tests that move a process's clock.
if ! command -v "$faketime" >/dev/null 2>&1; then
  if [[ $faketime == faketime ]] && can_apt; then
    apt_install faketime || fail "faketime and apt-get could not install it: run \`apt-get update && apt-get install -y faketime\`"
  fi
  command -v "$faketime" >/dev/null 2>&1 || fail "faketime: run \`sudo apt-get install -y faketime\` (or set OUTLAST_FAKETIME to its path)"
fi

# PgBouncer (Debian's), for the tests of the store through a transaction-mode pooler (test/pgbouncer.ts starts its own).
if ! command -v pgbouncer >/dev/null 2>&1; then
  if can_apt; then
    apt_install pgbouncer || fail "PgBouncer and apt-get could not install it: run \`apt-get update && apt-get install -y pgbouncer\`"
  fi
  command -v pgbouncer >/dev/null 2>&1 || fail "pgbouncer: run \`sudo apt-get install -y pgbouncer\`"
fi

# redis-server, for the tests of --bus redis:// (test/redis-server.ts starts its own on a free port).
if ! command -v redis-server >/dev/null 2>&1; then
  if can_apt; then
    apt_install redis-server || fail "Redis and apt-get could not install it: run \`apt-get update && apt-get install -y redis-server\`"
  fi
  command -v redis-server >/dev/null 2>&1 || fail "redis-server: run \`sudo apt-get install -y redis-server\`"
fi

# PostgreSQL's server binaries (initdb, pg_ctl) for the restart test's private cluster.
if ! compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null; then
  if can_apt; then
    apt_install postgresql || fail "PostgreSQL and apt-get could not install it: run \`apt-get update && apt-get install -y postgresql\`"
  fi
  compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || fail "PostgreSQL's server binaries (initdb, pg_ctl): run \`sudo apt-get install -y postgresql\`"
fi

# The shared PostgreSQL the store tests use: start the machine's cluster when nothing listens.
if [[ ! $pg_url =~ ^postgres(ql)?://([^@/]*@)?([^:/?]+)(:([0-9]+))?/ ]]; then
  fail "OUTLAST_TEST_PG to be a postgres:// URL with a host (it is \"$pg_url\")"
fi
pg_host=${BASH_REMATCH[3]}
pg_port=${BASH_REMATCH[5]:-5432}
if ! listening "$pg_host" "$pg_port"; then
  cluster=$(ls /etc/postgresql 2>/dev/null | head -n 1)
  start="pg_ctlcluster --skip-systemctl-redirect $cluster main start"
  if [[ -n $cluster && $pg_port == 5432 ]] && command -v pg_ctlcluster >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]]; then
      echo "npm test: starting PostgreSQL ($start)" >&2
      $start >/dev/null 2>&1
      for _ in $(seq 1 100); do listening "$pg_host" "$pg_port" && break; sleep 0.1; done
    fi
    listening "$pg_host" "$pg_port" || fail "PostgreSQL on $pg_host:$pg_port, where nothing listens: run \`sudo $start\`"
  else
    fail "PostgreSQL on $pg_host:$pg_port, where nothing listens: start it there (Debian: \`sudo apt-get install -y postgresql\`), or set OUTLAST_TEST_PG"
  fi
fi
# Reachable with the tests' URL (trust auth, the database exists); a missing database is created.
if command -v psql >/dev/null 2>&1; then
  if ! err=$(psql "$pg_url" -Atqc 'select 1' 2>&1 >/dev/null); then
    db=${pg_url##*/}
    db=${db%%\?*}
    if [[ $err == *"does not exist"* ]] && psql "${pg_url%/*}/postgres" -qc "create database \"$db\"" >/dev/null 2>&1; then
      echo "npm test: created database $db" >&2
    else
      fail "$pg_url to accept the tests (trust auth for its user, the database created): $(echo "$err" | head -n 1)"
    fi
  fi
fi
exit 0
