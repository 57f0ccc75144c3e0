# ENS — Email Notification Service. Targets:
#
#   make run     install missing Debian packages, build, start MariaDB + ens-fcgi +
#                nginx under var/, print an API token and a curl command; Ctrl-C stops
#   make stop    stop what `make run` started
#   make test    install what is missing, build, run every test (unit + integration)
#                against a private stack under var/test, then tear it down
#   make bench   benchmarks through nginx on loopback (bounded in time)
#   make lint    C-module containment, shellcheck, no fatalError/try! in Sources
#   make build   release build of ens-fcgi, ens-apns, ens-cron
#   make clean   remove build output and var/

SHELL := /bin/bash
export PATH := /opt/swift/usr/bin:$(PATH)

.PHONY: run stop test bench lint build build-debug deps clean

deps:
	@scripts/deps.sh

build: deps
	swift build -c release

build-debug: deps
	swift build --build-tests

run: build
	@scripts/run.sh

stop:
	@scripts/stack.sh down

test: build-debug lint
	@scripts/test.sh

bench: build
	@bench/run.sh

lint:
	@scripts/lint.sh

clean:
	rm -rf .build var
