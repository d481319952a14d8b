# test/lib/common.sh: shared by test/run-tests, test/demo and the benchmarks.
#
# Installs what is missing (Debian packages), builds and installs dlock, and
# starts and stops throwaway clusters.  A throwaway cluster lives in a folder
# under the checkout, is owned by the postgres user (PostgreSQL refuses to
# run as root), listens on 127.0.0.1 on a free port (never 5432) and on a
# Unix socket in a private directory; the machine's default cluster is never
# touched.
#
# Source it from bash; it defines functions and variables, nothing runs.

DLOCK_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DLOCK_RUN_USER=postgres

# The server to build for and test against (test/pg-server): 15 is
# Debian's binary packages; 15-assert, 17-assert and 18-assert are
# assertion-enabled builds from Debian's source packages.  PG_CONFIG, when
# set, names a server directly and wins.  dlock_select_server sets
# PG_CONFIG, PG_BINDIR, PG_MAJOR and PGXS_DIR.
DLOCK_PG=${DLOCK_PG:-15}
PG_CONFIG=${PG_CONFIG:-}
PG_BINDIR=
PG_MAJOR=
PGXS_DIR=

# The Debian packages the two commands need.  Debian's PostgreSQL 15 is
# always there: it is the default server, and the pg_upgrade test upgrades
# from it.  prometheus-postgres-exporter is for test/t/040_prometheus.pl,
# patroni and etcd-server for test/t/050_patroni.pl, the python3-*
# packages and mypy for the Python client (clients/python: psycopg 3, its
# pool, pytest, pip for its offline install test, mypy for its type check),
# python3-jsonschema for the check of META.json (test/t/037_release.pl).
# The packages suite (test/packages/run-tests) and make deb and make dist
# (tools/make-deb, tools/make-dist) install what they need themselves.
DLOCK_PACKAGES=(
    make gcc
    postgresql-15 postgresql-server-dev-15 postgresql-15-pgtap
    libtap-parser-sourcehandler-pgtap-perl libipc-run-perl
    pgbouncer prometheus-postgres-exporter patroni etcd-server
    python3-psycopg python3-psycopg-pool python3-pytest python3-pip mypy
    python3-jsonschema
)

# Packages whose installation starts a system service the tests neither
# use nor want, as PACKAGE or PACKAGE:SERVICE when the service has another
# name: prometheus-postgres-exporter's would listen on :9187 and connect to
# the machine's default cluster (the test starts its own exporter);
# patroni's would run /etc/patroni's configuration; etcd-server's (etcd)
# would listen on :2379 and :2380 (test/t/050_patroni.pl and the bench
# start their own etcd).  dlock_ensure_packages stops and disables the
# service right after it installed the package; a package that was
# already installed is left as its administrator set it up.
DLOCK_QUIET_SERVICES=(prometheus-postgres-exporter patroni etcd-server:etcd)

# What make bench needs besides (bench/run): libpq's headers for its
# clients, etcd's client for the comparison of dlock run with etcdctl
# lock (bench/workloads/90-etcd.sh; its server, etcd-server, is in
# DLOCK_PACKAGES), and valgrind, whose callgrind counts the fence's
# instructions (bench/workloads/56-fence-instructions.sh).
DLOCK_BENCH_PACKAGES=(libpq-dev etcd-client valgrind)

dlock_say() { printf '%s\n' "$*"; }
dlock_die() { printf 'dlock: %s\n' "$*" >&2; exit 1; }

# dlock_ensure_packages installs the packages in DLOCK_PACKAGES (and any
# given as arguments) that are not installed yet.
dlock_ensure_packages() {
    local pkg missing=()
    for pkg in "${DLOCK_PACKAGES[@]}" "$@"; do
        if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]; then
            missing+=("$pkg")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || dlock_die "missing packages: ${missing[*]} (run as root, or install them)"
    dlock_say "== installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q </dev/null || dlock_die "apt-get update failed"
    apt-get install -y -q "${missing[@]}" </dev/null || dlock_die "apt-get install failed"
    local svc
    for svc in "${DLOCK_QUIET_SERVICES[@]}"; do
        case " ${missing[*]} " in *" ${svc%%:*} "*) dlock_quiet_service "${svc#*:}" ;; esac
    done
}

# dlock_quiet_service NAME stops the system service NAME and keeps it from
# starting at boot, with systemd or System V init (best effort: a machine
# without either, like a container, never started it).
dlock_quiet_service() {
    dlock_say "== stopping and disabling the $1 service its package started (the tests run their own)"
    if [ -d /run/systemd/system ]; then
        systemctl disable --now "$1.service" >/dev/null 2>&1 || true
    else
        if command -v systemctl >/dev/null; then systemctl disable "$1.service" >/dev/null 2>&1 || true; fi
        invoke-rc.d "$1" stop >/dev/null 2>&1 || true
        update-rc.d "$1" disable >/dev/null 2>&1 || true
    fi
}

# dlock_select_server finds (building it when needed: test/pg-server) the
# server DLOCK_PG names, unless PG_CONFIG is set, and sets PG_CONFIG,
# PG_BINDIR, PG_MAJOR (15, 17, ...) and PGXS_DIR (where pg_regress,
# pg_isolation_regress and the Perl test modules are).  Call it after
# dlock_ensure_packages.
dlock_select_server() {
    if [ -z "$PG_CONFIG" ]; then
        PG_CONFIG=$("$DLOCK_TOP/test/pg-server" pg-config "$DLOCK_PG") ||
            dlock_die "no PostgreSQL server '$DLOCK_PG'"
    fi
    PG_BINDIR=$("$PG_CONFIG" --bindir) || dlock_die "$PG_CONFIG does not run"
    PG_MAJOR=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
    PGXS_DIR=$("$PG_CONFIG" --pkglibdir)/pgxs
    [ -n "$PG_MAJOR" ] || dlock_die "cannot tell the version of $PG_CONFIG"
    export PG_CONFIG
}

# dlock_run_as_pg runs a command as the postgres user (directly when we
# already are that user or not root).
dlock_run_as_pg() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u "$DLOCK_RUN_USER" -- "$@"
    else
        "$@"
    fi
}

# dlock_ensure_access lets the postgres user reach the checkout: it needs to
# traverse every parent directory.  Only the search (x) bit is added, and
# only where it is missing.
dlock_ensure_access() {
    [ "$(id -u)" -eq 0 ] || return 0
    dlock_run_as_pg test -r "$DLOCK_TOP/Makefile" && return 0
    local d=$DLOCK_TOP
    while [ "$d" != "/" ]; do
        if ! dlock_run_as_pg test -x "$d"; then
            dlock_say "== granting the postgres user search access to $d"
            chmod o+x "$d"
        fi
        d=$(dirname "$d")
    done
    dlock_run_as_pg test -r "$DLOCK_TOP/Makefile" ||
        dlock_die "the postgres user cannot read $DLOCK_TOP"
}

# dlock_build_install builds dlock with warnings as errors and installs it
# into PostgreSQL's directories.
dlock_build_install() {
    dlock_say "== building and installing dlock"
    make -s -C "$DLOCK_TOP" PG_CONFIG="$PG_CONFIG" all >/dev/null || dlock_die "build failed"
    make -s -C "$DLOCK_TOP" PG_CONFIG="$PG_CONFIG" install >/dev/null || dlock_die "install failed"
}

# dlock_prepare [use-installed] builds and installs dlock, unless
# DLOCK_NO_BUILD is set (a tree that is already installed).  A non-root user
# who cannot write PostgreSQL's directories cannot install: with
# use-installed the dlock already installed is used (the demo), otherwise
# it is an error (tests must run the checkout's code).
dlock_prepare() {
    [ -n "${DLOCK_NO_BUILD:-}" ] && return 0
    if [ "$(id -u)" -ne 0 ] && [ ! -w "$("$PG_CONFIG" --pkglibdir)" ]; then
        if [ "${1:-}" = use-installed ] &&
            [ -f "$("$PG_CONFIG" --sharedir)/extension/dlock.control" ]; then
            dlock_say "== not root: using the dlock already installed (run 'sudo make install' to update it)"
            return 0
        fi
        dlock_die "$(id -un) cannot install into PostgreSQL's directories: run as root, or 'sudo make install' first and set DLOCK_NO_BUILD=1"
    fi
    dlock_build_install
}

# dlock_workdir NAME creates (empty) and prints $DLOCK_TOP/NAME, owned by
# the postgres user.
dlock_workdir() {
    local dir=$DLOCK_TOP/$1
    if [ -d "$dir" ]; then
        dlock_stop_clusters_under "$dir"
        rm -rf "$dir"
    fi
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown "$DLOCK_RUN_USER": "$dir"
    printf '%s\n' "$dir"
}

# dlock_stop_clusters_under DIR stops any cluster a previous, interrupted run
# left running under DIR.
dlock_stop_clusters_under() {
    local pid_file
    while IFS= read -r pid_file; do
        dlock_run_as_pg "$PG_BINDIR/pg_ctl" -D "$(dirname "$pid_file")" -m immediate stop >/dev/null 2>&1 || true
    done < <(find "$1" -name postmaster.pid 2>/dev/null)
}

# dlock_free_port prints a TCP port on 127.0.0.1 that nothing listens on,
# in 10000-17999: below the kernel's range of ephemeral ports
# (ip_local_port_range, 32768-60999 by default), since a port in that range
# can be the local end of any outgoing connection (a test's client, apt),
# which no connect() sees and which makes the server's bind() fail
# ("Address already in use": a make test failed so, once); and apart from
# the client suites' bands (Python 18000-24999, Node 25000 up), so that
# suites started side by side do not pick each other's ports.
dlock_free_port() {
    local port tries=0
    while [ $tries -lt 200 ]; do
        port=$((10000 + RANDOM % 8000))
        tries=$((tries + 1))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    dlock_die "no free port found"
}

# dlock_cluster_start DIR [CONF-LINE...] initialises a cluster in DIR/data,
# appends the given postgresql.conf lines, starts it and exports PGHOST,
# PGPORT, PGUSER and DLOCK_CLUSTER_DIR for the callers' psql.
dlock_cluster_start() {
    local dir=$1
    shift
    local sockdir port line
    sockdir=$(mktemp -d /tmp/dlock-sock.XXXXXX)
    [ "$(id -u)" -eq 0 ] && chown "$DLOCK_RUN_USER": "$sockdir"
    dlock_run_as_pg "$PG_BINDIR/initdb" -D "$dir/data" -U postgres --auth=trust \
        --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; dlock_die "initdb failed"; }
    port=$(dlock_free_port)
    {
        echo "port = $port"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$sockdir'"
        echo "max_connections = 50"
        for line in "$@"; do echo "$line"; done
    } >>"$dir/data/postgresql.conf"
    # Another process may bind the port between the pick and the start:
    # then the start is tried again on a new port, up to 5 times.
    local tries=0
    until dlock_run_as_pg "$PG_BINDIR/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null; do
        tries=$((tries + 1))
        if [ $tries -gt 5 ] || ! grep -q 'could not bind' "$dir/server.log"; then
            cat "$dir/server.log" >&2
            dlock_die "the throwaway cluster did not start"
        fi
        : >"$dir/server.log"
        port=$(dlock_free_port)
        echo "port = $port" >>"$dir/data/postgresql.conf"
    done
    export PGHOST=$sockdir PGPORT=$port PGUSER=postgres DLOCK_CLUSTER_DIR=$dir
    unset PGDATABASE PGPASSWORD PGSERVICE
}

# dlock_cluster_stop stops the cluster dlock_cluster_start started last.
dlock_cluster_stop() {
    [ -n "${DLOCK_CLUSTER_DIR:-}" ] || return 0
    dlock_run_as_pg "$PG_BINDIR/pg_ctl" -D "$DLOCK_CLUSTER_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    [ -n "${PGHOST:-}" ] && case $PGHOST in /tmp/dlock-sock.*) rm -rf "$PGHOST" ;; esac
    DLOCK_CLUSTER_DIR=
}
