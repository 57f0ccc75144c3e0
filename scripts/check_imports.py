#!/usr/bin/env python3
"""make lint: the import rules Package.swift cannot say, no type named like its module, and
no store call's failure dropped by `try?` without a comment that says why.

Package.swift is the module graph (scripts/check_manifest.py holds every target to it,
exactly). What a manifest cannot say is which edges it must never grow, and which
folders inside a module keep out of what the module as a whole may use; those rules
are here, each with its reason.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
IMPORT = re.compile(r"^\s*(?:@\w+\s+)?(?:public |internal |package |private |fileprivate )?import (?:(?:struct|class|enum|func|protocol) )?(\w+)", re.M)

# Modules only some may import, whatever a manifest edit would allow.
ONLY = {
    # Each C library is reached through its one wrapper, which owns every pointer of it.
    "CFastCGI": {"FastCGI"}, "CMariaDB": {"MariaDB"}, "COpenSSL": {"OpenSSL"}, "CCurl": {"Curl"},
    "CLibXML2": {"XML"}, "CLinux": {"POSIX"},
    # SQL is ENSStore's: the layers above hold its `Database` and hand it to stores.
    "MariaDB": {"ENSStore"},
    # The sender's HTTP/2 and the pool's FastCGI stay in their services.
    "FastCGI": {"ENSResponder"},
}
# Modules that must not import these, whatever their manifest entry says.
NEVER = {
    # Protocol clients speak Exchange and Graph; they know nothing of ENS's stores,
    # vault, configuration or metrics.
    "EWS": {"ENSStore", "ENSVault", "ENSConfig", "ENSMetrics", "SenderWire", "Graph"},
    "Graph": {"ENSStore", "ENSVault", "ENSConfig", "ENSMetrics", "SenderWire", "EWS"},
    # The values and the keys below every service.
    "ENSModel": {"ENSConfig", "ENSStore", "ENSVault", "ENSMetrics"},
    "ENSVault": {"ENSConfig", "ENSStore", "ENSMetrics"},
    # The HTTP core is below every backend and the services: a request goes down from
    # the dispatcher to a handler and never back up.
    "ENSHTTP": {"EWS", "Graph", "Curl", "MailBackends", "ENSResponder", "ENSMaintenance", "ENSSender", "FastCGI"},
}
# Folders of MailBackends: a backend's folder does not reach into another backend.
FOLDERS = {
    "Sources/MailBackends/Exchange": {"Graph"},
    "Sources/MailBackends/Graph": {"EWS"},
}
# The shared folder (Mail/) imports no backend's client: what every backend shares
# knows none of them.
SHARED_FOLDERS = ("Sources/MailBackends/Mail",)
BACKEND_CLIENTS = {"EWS", "Graph"}

problems = []
for path in sorted((root / "Sources").rglob("*.swift")):
    module = path.relative_to(root / "Sources").parts[0]
    relative = str(path.relative_to(root))
    imported = set(IMPORT.findall(path.read_text()))
    for name in sorted(imported):
        if name in ONLY and module not in ONLY[name]:
            problems.append(f"{relative}: only {', '.join(sorted(ONLY[name]))} may import {name}")
        if name in NEVER.get(module, set()):
            problems.append(f"{relative}: {module} must not import {name}")
    for folder, banned in FOLDERS.items():
        if relative.startswith(folder + "/"):
            for name in sorted(imported & banned):
                problems.append(f"{relative}: {folder} must not import {name} (one backend's folder)")
    if relative.startswith(SHARED_FOLDERS):
        for name in sorted(imported & BACKEND_CLIENTS):
            problems.append(f"{relative}: the shared folders of MailBackends must not import the backend client {name}")
# A store call's failure is not dropped silently: `try?` around one needs a comment on
# its line or the line above that says why the failure may be ignored.
STORE_CALL = re.compile(r"try\? *\(?[\w.]*(?:Store|store|database|Database|Maintenance|KeyPool|NotificationLog|notificationLog|"
                        r"ProofThrottle|SealedValuesUsed|CredentialErasure|CronLease|SenderHost|APITokens|MetricGauges)\b")
for path in sorted((root / "Sources").rglob("*.swift")):
    lines = path.read_text().split("\n")
    for number, line in enumerate(lines):
        if STORE_CALL.search(line) and "//" not in line and not (number > 0 and lines[number - 1].strip().startswith("//")):
            problems.append(f"{path.relative_to(root)}:{number + 1}: try? around a store call with no comment saying why its failure is ignored")
# No type named like its module: `Module.Name` must always mean the module's member.
for directory in sorted((root / "Sources").iterdir()):
    if not directory.is_dir():
        continue
    named = re.compile(rf"^\s*(?:public |internal |package |fileprivate |private )?(?:final )?(?:struct|class|enum|protocol|actor) {re.escape(directory.name)}\b", re.M)
    for path in sorted(directory.rglob("*.swift")):
        if named.search(path.read_text()):
            problems.append(f"{path.relative_to(root)}: a type named like its module {directory.name}")
if problems:
    print("lint: imports against the layer rules (scripts/check_imports.py):")
    print("\n".join(problems))
    sys.exit(1)
