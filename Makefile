# Makefile for dlock (PGXS).
#
#   make                 build the extension and the dlock command-line tool
#   make install         install both into the PostgreSQL that PG_CONFIG names
#   make test            install what is missing, build, install, run every suite
#                        on Debian's PostgreSQL 15
#   make test PG=18      the same on another server: 15, 15-assert, 17 (= 17-assert),
#                        18 (= 18-assert); assertion-enabled servers are built from
#                        Debian's source packages and cached (test/pg-server)
#   make test-all        every suite on 15, 15-assert, 17-assert and 18-assert
#   make pg-config PG=18 print that server's pg_config (building it if needed)
#   make demo            the life of a lease on a throwaway cluster
#   make bench           measure on a throwaway cluster (not part of make test)
#   make installcheck    pg_regress against a temporary instance (as a non-root user)
#
# PG_CONFIG may be overridden: make PG_CONFIG=/path/to/pg_config; or
# make PG=18 install builds and installs for the server test/pg-server names.

EXTENSION = dlock
MODULE_big = dlock
OBJS = src/dlock.o src/lease.o src/store.o src/lease_table.o src/fence.o src/wait.o src/shmem.o src/token.o
DATA = dlock--1.0.sql dlock--1.1.sql dlock--1.0--1.1.sql
PGFILEDESC = "dlock - fenced leases for PostgreSQL"

# The dlock command-line tool (cli/): a libpq program, not part of the
# extension's OBJS.  Built by "all", installed next to PostgreSQL's client
# programs (pg_config --bindir) by "install"; rules below the PGXS include.
CLI_SRCS = cli/dlock.c cli/run.c cli/conn.c cli/signals.c cli/util.c
EXTRA_CLEAN = cli/dlock

# Every object depends on the shared headers (PGXS tracks no header
# dependencies without --enable-depend).
$(OBJS): src/dlock.h src/compat.h src/lease_table.h

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --encoding=UTF8 --no-locale --temp-instance=./tmp_check/regress_instance
ISOLATION = $(patsubst specs/%.spec,%,$(sort $(wildcard specs/*.spec)))
ISOLATION_OPTS = --encoding=UTF8 --no-locale --load-extension=dlock \
	--temp-config=test/preload.conf --temp-instance=./tmp_check/isolation_instance

# Warnings are errors.  All of -Wextra except unused parameters: callbacks
# with signatures fixed by PostgreSQL (fmgr, cache invalidation) ignore some.
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter

# The commands that find their server themselves (test/pg-server).
DLOCK_COMMANDS = test test-all pg-config demo bench

# Debian's PostgreSQL 15 unless told otherwise (PG_CONFIG=..., or PG=...
# for a server of test/pg-server); fall back to PATH.
ifneq ($(PG),)
ifeq ($(origin PG_CONFIG),undefined)
ifneq ($(filter-out $(DLOCK_COMMANDS),$(or $(MAKECMDGOALS),all)),)
PG_CONFIG := $(shell test/pg-server pg-config $(PG))
endif
endif
endif
PG_CONFIG ?= $(firstword $(wildcard /usr/lib/postgresql/15/bin/pg_config) pg_config)

PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
.DEFAULT_GOAL := all

# The README's commands (test and demo, and bench).  They install what they
# need first, so they must work before PostgreSQL's development files are there.
.PHONY: test test-all pg-config demo bench
test:
	@DLOCK_PG=$(or $(PG),15) test/run-tests

test-all:
	@test/run-all

pg-config:
	@test/pg-server pg-config $(or $(PG),15)

demo:
	@test/demo

bench:
	@bench/run

ifneq ($(wildcard $(PGXS)),)
include $(PGXS)

DLOCK_VERSION := $(shell sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" dlock.control)

# Objects built for one server must not be linked for another: .pg-build
# names the server the objects are for, and is rewritten (so everything
# rebuilds) when PG_CONFIG names another one.
PG_BUILD_ID := $(PG_CONFIG) $(VERSION)
ifneq ($(shell cat .pg-build 2>/dev/null),$(PG_BUILD_ID))
$(shell echo '$(PG_BUILD_ID)' > .pg-build)
endif
$(OBJS) $(OBJS:.o=.bc) $(shlib): .pg-build
EXTRA_CLEAN += .pg-build

all: cli/dlock

# libpq of the server built for: a server outside the system's library
# directories (an assertion-enabled build) is found through the rpath.
PG_LIBDIR := $(shell $(PG_CONFIG) --libdir)
CLI_RPATH := $(if $(filter /usr/lib/% /lib/%,$(PG_LIBDIR)),,-Wl,-rpath,$(PG_LIBDIR))

cli/dlock: $(CLI_SRCS) cli/dlock_cli.h dlock.control .pg-build
	$(CC) $(CFLAGS) -Wextra -Wunused-parameter -Werror \
		-DDLOCK_VERSION='"$(DLOCK_VERSION)"' \
		-I$(shell $(PG_CONFIG) --includedir) -o $@ $(CLI_SRCS) \
		$(LDFLAGS) -L$(PG_LIBDIR) $(CLI_RPATH) -lpq

.PHONY: install-cli uninstall-cli
install: install-cli
install-cli: cli/dlock
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) cli/dlock '$(DESTDIR)$(bindir)/dlock'

uninstall: uninstall-cli
uninstall-cli:
	rm -f '$(DESTDIR)$(bindir)/dlock'
else
all install installcheck:
	@echo "dlock: PostgreSQL development files are missing (no PGXS at '$(PGXS)')." >&2
	@echo "dlock: 'make test' or 'make demo' installs them; or apt-get install postgresql-server-dev-15." >&2
	@exit 1
endif
