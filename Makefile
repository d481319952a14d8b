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
#   make test-stress     every TAP file and isolation spec, many times under CPU load
#                        (PG=..., RUNS=N, FILES="test/t/005_wait.pl race-wait"; test/stress)
#   make pg-config PG=18 print that server's pg_config (building it if needed)
#   make demo            the life of a lease on a throwaway cluster
#   make bench           measure on a throwaway cluster (not part of make test)
#   make installcheck    pg_regress against a temporary instance (as a non-root user)
#   make install-script  regenerate the full install script dlock--<version>.sql
#                        (make does when its sources change; tools/gen-install-script)
#   make deb             Debian packages from a clean copy of the tree, into dist/debian/
#                        (tools/make-deb: dpkg-buildpackage, regression at build time, lintian)
#   make dist            the PGXN release, dist/dlock-<release>.zip (git archive of HEAD)
#   make format          format the C code with PostgreSQL's pgindent (tools/pgindent);
#                        make format-check changes nothing, shows the diff, fails on it
#   make install NO_CLI=1  the extension only, not the command-line tool (the Debian
#                        build: the tool has a package of its own)
#
# PG_CONFIG may be overridden: make PG_CONFIG=/path/to/pg_config; or
# make PG=18 install builds and installs for the server test/pg-server names.

EXTENSION = dlock
MODULE_big = dlock
OBJS = src/dlock.o src/xact.o src/lease.o src/lease_set.o src/async_commit.o src/store.o src/store_cache.o src/store_ops.o src/store_restricted.o src/lease_table.o src/lease_change.o src/lease_fence.o src/lease_room.o src/fence.o src/fence_config.o src/template.o src/fence_cache.o src/fence_cache_write.o src/checked.o src/mark.o src/mark_find.o src/token.o src/wait.o src/wait_any.o src/wait_wake.o src/wait_shmem.o src/stats.o src/events.o src/notifier.o src/notifier_shmem.o src/notifier_worker.o src/notifier_command.o src/name_hash.o src/name_lock.o
DATA = dlock--1.0.sql dlock--1.1.sql dlock--1.2.sql dlock--1.0--1.1.sql dlock--1.1--1.2.sql
PGFILEDESC = "dlock - fenced leases for PostgreSQL"

# The dlock command-line tool (cli/): a libpq program, not part of the
# extension's OBJS, built by its own cli/Makefile, which all, install,
# uninstall and clean call with this PG_CONFIG (rules below the PGXS
# include).  It installs dlock next to PostgreSQL's client programs
# (pg_config --bindir) and its manual page, dlock.1, into pg_config --mandir.

# Every object depends on the shared headers (PGXS tracks no header
# dependencies without --enable-depend).
$(OBJS): src/dlock.h src/compat.h src/fence_cache.h src/fence_cache_int.h src/fence_int.h src/lease_room.h src/lease_table.h src/lease_table_int.h src/name_hash.h src/notifier_int.h src/store_int.h src/wait_int.h

# The suites' options are shared with test/run-tests: test/regress.opts.
# make installcheck starts temporary instances of its own.  With
# DLOCK_SERVER=running it runs against the server that PGHOST and PGPORT
# name instead, one suite at a time (DLOCK_SUITE=regress or isolation):
# the isolation specs need dlock preloaded (shared_preload_libraries), the
# regress files need it not.  The Debian build runs each in a pg_virtualenv
# of its own (debian/rules, pg_buildext installcheck).
include test/regress.opts
REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
ISOLATION = $(patsubst specs/%.spec,%,$(sort $(wildcard specs/*.spec)))
ifeq ($(DLOCK_SERVER),running)
REGRESS_OPTS = $(DLOCK_REGRESS_OPTS)
ISOLATION_OPTS = $(filter-out --temp-config=%,$(DLOCK_ISOLATION_OPTS))
ifeq ($(DLOCK_SUITE),regress)
ISOLATION =
else ifeq ($(DLOCK_SUITE),isolation)
REGRESS =
else
$(error DLOCK_SERVER=running needs DLOCK_SUITE=regress or DLOCK_SUITE=isolation)
endif
else
REGRESS_OPTS = $(DLOCK_REGRESS_OPTS) --temp-instance=./tmp_check/regress_instance
ISOLATION_OPTS = $(DLOCK_ISOLATION_OPTS) --temp-instance=./tmp_check/isolation_instance
endif

# Warnings are errors.  All of -Wextra except unused parameters: callbacks
# with signatures fixed by PostgreSQL (fmgr, cache invalidation) ignore some.
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter

# The commands that find their server themselves (test/pg-server), or
# need none.
DLOCK_COMMANDS = test test-all pg-config demo bench install-script deb dist format format-check test-stress

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
.PHONY: test test-all pg-config demo bench deb dist format format-check test-stress
test:
	@DLOCK_PG=$(or $(PG),15) test/run-tests

test-all:
	@test/run-all

.PHONY: test-stress
test-stress:
	@DLOCK_PG=$(or $(PG),15) DLOCK_STRESS_RUNS=$(or $(RUNS),5) test/stress $(FILES)

pg-config:
	@test/pg-server pg-config $(or $(PG),15)

demo:
	@test/demo

bench:
	@bench/run

deb:
	@tools/make-deb

dist:
	@tools/make-dist

format:
	@tools/pgindent

format-check:
	@tools/pgindent --check

# The release (1.2.0) is written in one place, VERSION.  What else names
# it must agree (test/t/037_release.pl checks): META.json, debian/changelog,
# CHANGELOG.md, the clients' packages, and dlock.control, whose
# default_version (the SQL version, 1.2) is the release's first two parts.
# dlock --version prints it (cli/Makefile reads VERSION).

DLOCK_VERSION := $(shell sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" dlock.control)

# The full install script of the current version is generated from the
# base script, the update scripts from it and tools/install-tail.sql
# (tools/gen-install-script), so that a fresh install and an update cannot
# drift apart.  It stays committed (DATA installs it); make regenerates it
# when one of its sources is newer, "make install-script" always.
# test/t/030_docs.pl checks that the committed file is the generated one.
DLOCK_BASE_VERSION = 1.0
DLOCK_UPDATE_SCRIPTS = $(wildcard $(EXTENSION)--*--*.sql)
DLOCK_INSTALL_SCRIPT = $(EXTENSION)--$(DLOCK_VERSION).sql

.PHONY: install-script
ifneq ($(DLOCK_VERSION),$(DLOCK_BASE_VERSION))
$(DLOCK_INSTALL_SCRIPT): $(EXTENSION)--$(DLOCK_BASE_VERSION).sql $(DLOCK_UPDATE_SCRIPTS) \
		tools/install-tail.sql tools/gen-install-script
	tools/gen-install-script $(DLOCK_BASE_VERSION) $(DLOCK_VERSION) > $@.tmp
	mv $@.tmp $@

install-script:
	tools/gen-install-script $(DLOCK_BASE_VERSION) $(DLOCK_VERSION) > $(DLOCK_INSTALL_SCRIPT).tmp
	mv $(DLOCK_INSTALL_SCRIPT).tmp $(DLOCK_INSTALL_SCRIPT)
else
install-script:
	@echo "dlock: $(DLOCK_INSTALL_SCRIPT) is the base script, written by hand"
endif

ifneq ($(wildcard $(PGXS)),)
include $(PGXS)

# Objects built for one server must not be linked for another: .pg-build
# names the server the objects are for, and is rewritten (so everything
# rebuilds) when PG_CONFIG names another one.
PG_BUILD_ID := $(PG_CONFIG) $(VERSION)
ifneq ($(shell cat .pg-build 2>/dev/null),$(PG_BUILD_ID))
$(shell echo '$(PG_BUILD_ID)' > .pg-build)
endif
$(OBJS) $(OBJS:.o=.bc) $(shlib): .pg-build
EXTRA_CLEAN += .pg-build

# The command-line tool: cli/Makefile, with this PG_CONFIG (made absolute
# when it is a path, since cli/Makefile runs in cli/).
CLI_MAKEFLAGS = -C cli PG_CONFIG='$(if $(findstring /,$(PG_CONFIG)),$(abspath $(PG_CONFIG)),$(PG_CONFIG))'

all: $(DLOCK_INSTALL_SCRIPT)

# pg_regress creates its --temp-instance directory, but not the parent.
installcheck: | tmp_check
tmp_check:
	$(MKDIR_P) $@

.PHONY: all-cli install-cli uninstall-cli clean-cli cli/dlock
ifeq ($(NO_CLI),)
all: all-cli
install: install-cli
endif
all-cli:
	$(MAKE) $(CLI_MAKEFLAGS) all
# "make cli/dlock" still builds just the tool
cli/dlock: all-cli

install-cli: all-cli
	$(MAKE) $(CLI_MAKEFLAGS) install

uninstall: uninstall-cli
uninstall-cli:
	$(MAKE) $(CLI_MAKEFLAGS) uninstall

clean: clean-cli
clean-cli:
	$(MAKE) $(CLI_MAKEFLAGS) clean
else
all install installcheck:
	@echo "dlock: PostgreSQL development files are missing (no PGXS at '$(PGXS)')." >&2
	@echo "dlock: 'make test' or 'make demo' installs them; or apt-get install postgresql-server-dev-15." >&2
	@exit 1
endif
