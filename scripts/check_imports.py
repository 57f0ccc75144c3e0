#!/usr/bin/env python3
"""make lint: every module imports only the modules its layer may use.

The graph below is the one docs/architecture.md draws. Package.swift lists each
target's dependencies; SwiftPM lets a target import anything those bring in
transitively, so this check holds each source file to its module's row instead.
"""
import pathlib
import re
import sys

# What each module may import (besides the standard library, Glibc, Synchronization,
# Foundation in executables and tests).
LOGGING = {"Logging"}
WRAPPERS = {"Codecs", "POSIX", "OpenSSL", "Curl", "XML", "FastCGI", "MariaDB"}
ALLOWED = {
    # C libraries are reached only through their wrapper (check 1 of lint.sh).
    "Codecs": set(),
    "POSIX": {"CLinux"},
    "FastCGI": {"CFastCGI", "POSIX"},
    "MariaDB": {"CMariaDB"},
    "OpenSSL": {"COpenSSL", "Codecs"},
    "Curl": {"CCurl", "POSIX"},
    "XML": {"CLibXML2"},
    # ENS's own layers, lowest first.
    "ENSModel": {"Codecs", "POSIX"},
    "ENSConfig": {"ENSModel", "Codecs", "OpenSSL", "POSIX"} | LOGGING,
    "ENSMetrics": {"ENSModel", "POSIX"} | LOGGING,
    "ENSVault": {"ENSModel", "Codecs", "OpenSSL", "POSIX"},
    "ENSStore": {"ENSModel", "ENSConfig", "ENSMetrics", "ENSVault", "Codecs", "MariaDB", "OpenSSL", "POSIX"} | LOGGING,
    "SenderWire": {"ENSModel", "ENSVault", "Codecs", "OpenSSL", "POSIX"},
    # Protocol clients: no stores, vault or configuration.
    "EWS": {"ENSModel", "Codecs", "Curl", "OpenSSL", "POSIX", "XML"} | LOGGING,
    "Graph": {"ENSModel", "Codecs", "Curl", "OpenSSL", "POSIX"} | LOGGING,
    # Backends, then the services.
    "MailBackends": {"ENSModel", "ENSConfig", "ENSMetrics", "ENSVault", "ENSStore", "SenderWire", "EWS", "Graph",
                     "Codecs", "Curl", "OpenSSL", "POSIX"} | LOGGING,
    "ENSResponder": {"ENSModel", "ENSConfig", "ENSMetrics", "ENSVault", "ENSStore", "SenderWire", "MailBackends",
                     "Codecs", "Curl", "FastCGI", "OpenSSL", "POSIX"} | LOGGING,
    "ENSSender": {"ENSModel", "ENSConfig", "ENSMetrics", "ENSVault", "ENSStore", "SenderWire",
                  "Codecs", "Curl", "OpenSSL", "POSIX"} | LOGGING,
    "ENSMaintenance": {"ENSModel", "ENSConfig", "ENSMetrics", "ENSVault", "ENSStore", "SenderWire", "MailBackends",
                       "Graph", "POSIX"} | LOGGING,
    # Executables wire things together.
    "ens-fcgi": {"ENSConfig", "ENSMetrics", "ENSModel", "ENSResponder", "ENSStore", "MailBackends", "SenderWire", "POSIX"} | LOGGING,
    "ens-apns": {"ENSConfig", "ENSMetrics", "ENSModel", "ENSSender", "ENSStore", "SenderWire", "Codecs", "OpenSSL",
                 "POSIX", "ArgumentParser"} | LOGGING,
    "ens-cron": {"ENSConfig", "ENSMaintenance", "ENSMetrics", "ENSModel", "ENSSender", "ENSStore", "ENSVault", "SenderWire",
                 "MailBackends", "Graph", "Codecs", "OpenSSL", "POSIX", "ArgumentParser"} | LOGGING,
}
# Files above ENSStore allowed to import MariaDB: none. They hold ENSStore's `Database`
# (Sources/ENSStore/Database.swift) and hand it to stores; SQL is ENSStore's.
MARIADB_HANDLE_HOLDERS: set[str] = set()
ALWAYS = {"Swift", "Glibc", "Darwin", "Synchronization", "Foundation", "FoundationEssentials", "_Concurrency"}
IMPORT = re.compile(r"^\s*(?:@\w+\s+)?(?:public |internal |package |private |fileprivate )?import (?:(?:struct|class|enum|func|protocol) )?(\w+)", re.M)

problems = []
root = pathlib.Path(__file__).resolve().parent.parent
for path in sorted((root / "Sources").rglob("*.swift")):
    module = path.relative_to(root / "Sources").parts[0]
    relative = str(path.relative_to(root))
    if module not in ALLOWED:
        problems.append(f"{relative}: module {module} has no row in scripts/check_imports.py (add it where its layer is)")
        continue
    allowed = ALLOWED[module] | ALWAYS
    if module in {"ENSSender", "ENSResponder", "MailBackends", "ens-apns", "ens-cron"} and relative in MARIADB_HANDLE_HOLDERS:
        allowed = allowed | {"MariaDB"}
    for imported in IMPORT.findall(path.read_text()):
        if imported not in allowed:
            problems.append(f"{relative}: {module} may not import {imported}")
if problems:
    print("lint: imports outside the layer graph (docs/architecture.md):")
    print("\n".join(problems))
    sys.exit(1)
