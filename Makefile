# ENS — Email Notification Service. Targets:
#
#   make run     install missing Debian packages, build, start MariaDB + ens-fcgi +
#                nginx (ENS_FRONT=apache: Apache httpd) under var/, print an API token
#                and a curl command; Ctrl-C stops
#   make stop    stop what `make run` started
#   make test    install what is missing, build, run every test (unit + integration)
#                against a private stack under var/test, then tear it down (what CI runs)
#   make check   the inner loop: build, lint, the unit and in-process endpoint tests
#                (ENSKit, clients/ENSKit, is built and tested by make test)
#   make test-stack / make suite SUITE=ExchangeTests / make test-stack-stop
#                one integration suite (a regex) against a test stack left running
#   make bench   benchmarks through nginx on loopback (bounded in time), B1 and B2 also
#                through Apache httpd and plain CGI
#   make chaos   bounded fault injection against a private stack under var/chaos
#                (MariaDB restart, worker kill -9, ens-sender kill -9, ENS down 3 min)
#   make cluster three Galera nodes (each in a network namespace of its own as root),
#                two ENS hosts and an nginx load balancer on https://localhost:30443
#                (scripts/cluster.sh, var/cluster); prints a token and the demo command
#   make cluster-stop    stop it
#   make cluster-chaos   bounded failure tests against a private cluster (var/cluster-2):
#                Galera node kill, partition, ENS host kill under load; loss checks
#   make rolling-upgrade  the previous release (built in var/release-prev) upgraded to this
#                one on a private cluster, host by host under load (scripts/rolling-upgrade.sh;
#                make test runs its --short form); loss checks
#   make deb-previous    the previous release's .deb (var/release-prev/var/pkg), from which
#                scripts/deb-test.sh then also tests the upgrade to this tree's .deb
#   make fuzz    libFuzzer targets (Fuzz/) for the parsers, each for a bounded time
#                (about 10 minutes in all; FUZZ_SECONDS=N per target); corpus and
#                crashing inputs under var/fuzz
#   make lint    C-module containment, shellcheck, no fatalError/try! in Sources, and
#                config/ens.conf.example and ens.conf(5) as the key declarations generate them
#   make config-docs  rewrite config/ens.conf.example and debian/man/ens.conf.5 from the key
#                declarations (Sources/ENSConfig/Components)
#   make build   release build of ens-fcgi, ens-sender, ens-cron
#   make install install the binaries, SQL, nginx and Apache snippets, deployment files
#                and the example config under $(DESTDIR)$(PREFIX) (PREFIX defaults to /usr/local)
#   make deb     the Debian package (debian/), built offline with dpkg-buildpackage from the
#                same release build; the .deb lands in var/pkg; scripts/deb-test.sh tests it
#   make clean   remove build output and var/

SHELL := /bin/bash
export PATH := /opt/swift/usr/bin:$(PATH)
# The server's builds leave ENSKit out of the root manifest (Package.swift), so they never
# compile swift-crypto; clients/ENSKit's build (scripts/enskit-test.sh) takes it in.
export ENS_SERVER_ONLY := 1

.PHONY: run stop test check test-stack suite test-stack-stop bench lint build build-debug build-integration deps clean install config-docs
.PHONY: chaos
.PHONY: cluster cluster-stop cluster-chaos rolling-upgrade bench-check
.PHONY: fuzz
.PHONY: deb deb-previous

PREFIX ?= /usr/local
DESTDIR ?=
SHARE := $(DESTDIR)$(PREFIX)/share/ens

deps:
	@scripts/deps.sh

# Release binaries carry the Swift runtime and Foundation (--static-swift-stdlib): a
# host needs no Swift toolchain, and each responder maps fewer shared pages (B1 RSS
# 23.5 MB instead of 30 MB).
build: deps
	swift build -c release --static-swift-stdlib

build-debug: deps
	swift build --build-tests

# The same with the integration tests (Package.swift builds them only when asked).
build-integration: deps
	ENS_INTEGRATION_TESTS=1 swift build --build-tests

run: build
	@scripts/run.sh

stop:
	@scripts/stack.sh down

test: build-integration lint
	@scripts/test.sh

# The inner loop: build, lint, the unit and in-process endpoint tests (no stack).
check: build-debug lint
	@scripts/test.sh unit

# One integration suite against a test stack that stays up between runs.
test-stack: build-integration
	@scripts/test.sh up

suite:
	@scripts/test.sh suite "$(SUITE)"

test-stack-stop:
	@scripts/test.sh down

bench: build
	@bench/run.sh

# The benchmarks (BENCHES= for some), then their figures against this host class's
# thresholds (bench/thresholds/, bench/check-thresholds.py).
bench-check: build
	@rm -f var/bench-figures.txt
	@BENCH_FIGURES=$(CURDIR)/var/bench-figures.txt bench/run.sh
	@bench/check-thresholds.py var/bench-figures.txt

chaos: build
	@scripts/chaos.sh

cluster: build
	@scripts/cluster.sh up
	@scripts/cluster.sh info

cluster-stop:
	@scripts/cluster.sh down

cluster-chaos: build
	@scripts/cluster-chaos.sh

rolling-upgrade: build
	@scripts/rolling-upgrade.sh

fuzz: deps
	@scripts/fuzz.sh

lint:
	@scripts/lint.sh

# The example config and ens.conf(5) are generated from the key declarations; lint
# compares the committed files with what they generate.
config-docs:
	swift build --product ens-cron
	.build/debug/ens-cron config-reference --example > config/ens.conf.example
	.build/debug/ens-cron config-reference --man > debian/man/ens.conf.5

clean:
	rm -rf .build var Fuzz/.build

# The migrations land in $(PREFIX)/share/ens/sql/migrations: point db.migrations_dir
# there (the built-in default, /usr/share/ens/sql/migrations, matches PREFIX=/usr).
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(SHARE)/sql/migrations $(SHARE)/nginx $(SHARE)/deploy
	install -m 0755 .build/release/ens-fcgi .build/release/ens-sender .build/release/ens-cron $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 sql/migrations/*.sql $(SHARE)/sql/migrations/
	install -m 0644 sql/accounts.sql.in config/ens.conf.example $(SHARE)/
	install -d $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 0644 debian/man/ens.conf.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 nginx/ens-site.conf nginx/ens-locations.conf nginx/ens-fastcgi.conf $(SHARE)/nginx/
	install -d $(SHARE)/apache/errors
	install -m 0644 apache/ens-site.conf apache/ens-locations.conf apache/ens-proxy-fcgi.conf apache/ens-fcgid.conf apache/ens-cgi.conf $(SHARE)/apache/
	install -m 0644 apache/errors/*.json $(SHARE)/apache/errors/
	cp -R deploy/. $(SHARE)/deploy/
	install -d $(SHARE)/dovecot
	install -m 0644 dovecot/ens-push.lua $(SHARE)/dovecot/

# dpkg-buildpackage -b -us -uc with no network (in a network namespace of its own where
# unshare may make one): Swift package dependencies are resolved first, outside it.
# Output: var/pkg/ens_VERSION_ARCH.deb, the -dbgsym .deb, .buildinfo and .changes.
DEB_OUT := $(CURDIR)/var/pkg
# The build directory debian/rules builds in (ENS_DEB_SCRATCH there); .build unless set.
ENS_DEB_SCRATCH ?= .build
export ENS_DEB_SCRATCH
deb: deps
	swift package resolve --scratch-path $(ENS_DEB_SCRATCH)
	rm -rf $(DEB_OUT) && mkdir -p $(DEB_OUT)
	pva=ens_$$(dpkg-parsechangelog -S Version)_$$(dpkg-architecture -qDEB_HOST_ARCH); \
	offline=; if unshare --net true 2>/dev/null; then offline="unshare --net"; echo "deb: building without a network (unshare --net)"; fi; \
	DEB_DESTDIR=$(DEB_OUT) $$offline dpkg-buildpackage -b -us -uc \
	  --buildinfo-option=-u$(DEB_OUT) --buildinfo-file=$(DEB_OUT)/$$pva.buildinfo \
	  --changes-option=-u$(DEB_OUT) --changes-file=$(DEB_OUT)/$$pva.changes
	@ls -l $(DEB_OUT)

# The previous release's package (scripts/rolling-upgrade.sh names the release), made by
# its own make deb in its worktree: a release build of about 2.5 minutes on 2 cores,
# which make test does not spend; with it present, scripts/deb-test.sh tests the upgrade.
deb-previous: deps
	@scripts/rolling-upgrade.sh build-previous-deb
