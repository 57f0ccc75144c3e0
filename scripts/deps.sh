#!/usr/bin/env bash
# Installs the Debian packages ENS needs to build, run and test, if any are missing.
# Usage: scripts/deps.sh [extra-package ...]
set -euo pipefail

packages=(
  libfcgi-dev libmariadb-dev libssl-dev libcurl4-openssl-dev libxml2-dev pkg-config
  mariadb-server mariadb-client nginx openssl curl wrk nghttp2-client python3
  python3-venv procps psmisc shellcheck time
)
# Apache httpd in front instead of nginx (apache/): mod_security2 for its body and rate
# limits, mod_fcgid for the variant where Apache starts ens-fcgi itself, and suexec so
# that it (and CGI) start ENS as a user of its own, not as Apache's.
packages+=(apache2 libapache2-mod-security2 libapache2-mod-fcgid apache2-suexec-pristine)
# The Debian package (make deb, scripts/deb-test.sh): dpkg-buildpackage, debhelper, lintian
# (no fakeroot: debian/control says Rules-Requires-Root: no).
packages+=(dpkg-dev debhelper lintian)
# The Dovecot backend is tested against a real Dovecot: a private instance the test stack
# starts as nobody in its own directory (scripts/dovecot.sh); mail arrives over LMTP.
packages+=(dovecot-core dovecot-imapd dovecot-lmtpd)
packages+=("$@")

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done
# Tests seal parameters with Python's cryptography, an implementation independent of ours.
if ! python3 -c 'import cryptography' 2>/dev/null; then
  echo "deps: installing Python cryptography"
  python3 -m pip install -q cryptography 2>/dev/null || missing+=(python3-cryptography)
fi
# The APNs simulator (Tests/tools/apns_simulator.py) speaks HTTP/2 with Python's h2.
if ! python3 -c 'import h2' 2>/dev/null; then
  echo "deps: installing Python h2"
  python3 -m pip install -q h2 2>/dev/null || missing+=(python3-h2)
fi
# The DNS simulator and the DNS tests (Tests/tools/dns_simulator.py) write and read
# DNS messages with dnslib, independent of ENS's own reader.
if ! python3 -c 'import dnslib' 2>/dev/null; then
  echo "deps: installing Python dnslib"
  python3 -m pip install -q dnslib 2>/dev/null || missing+=(python3-dnslib)
fi
# bench/capacity-floor.sh measures MariaDB's least work through MySQL Connector/Python;
# nothing else needs it, so a failed install only says so.
if ! python3 -c 'import mysql.connector' 2>/dev/null; then
  echo "deps: installing Python mysql-connector-python (bench/capacity-floor.sh)"
  python3 -m pip install -q mysql-connector-python 2>/dev/null || echo "deps: mysql-connector-python not installed; bench/capacity-floor.sh will say so"
fi
# The metrics test checks ENS's exposition text with Prometheus' own parser.
if ! python3 -c 'import prometheus_client' 2>/dev/null; then
  echo "deps: installing Python prometheus_client"
  python3 -m pip install -q prometheus_client 2>/dev/null || missing+=(python3-prometheus-client)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# Debian's postinst scripts try to start the services; there is no init system here
# and we run our own instances, so tell invoke-rc.d not to.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod +x /usr/sbin/policy-rc.d
  trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
fi
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
