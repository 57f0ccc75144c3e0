#!/usr/bin/env python3
"""make lint: a release's migrations only expand (docs/operations.md, "Migrations").

Hosts of a cluster are upgraded one at a time, so the previous release's binaries run
on the schema a new release migrated. An expand migration only adds: tables, columns
that are nullable or have a default, indexes, backfills the older code ignores. Anything
that would break the previous release (dropping or renaming a table, column or index,
changing a column, deleting or truncating rows, a new NOT NULL column without a
default) is a contract step: a file named NNN_contract_<what>.sql whose header says
which release every host must run first:

    -- contract: requires release 0.3.0

`ens-cron migrate` refuses such a step while a host in SenderHosts runs an older release
(Migrator.contractGate), and says which.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIRECTORY = ROOT / "sql" / "migrations"
CONTRACT_NAME = re.compile(r"^\d{3}_contract_[a-z0-9_]+\.sql$")
CONTRACT_HEADER = re.compile(r"^-- contract: requires release (\d+\.\d+\.\d+)\s*$", re.M)
BREAKING = [
    (re.compile(r"\bDROP\s+(TABLE|COLUMN|INDEX|KEY|CONSTRAINT|FOREIGN\s+KEY|PRIMARY\s+KEY)\b", re.I), "drops"),
    (re.compile(r"\bRENAME\b", re.I), "renames"),
    (re.compile(r"\b(CHANGE|MODIFY)\s+(COLUMN\s+)?(IF\s+EXISTS\s+)?`?\w+", re.I), "changes a column"),
    (re.compile(r"\bTRUNCATE\b", re.I), "truncates"),
    (re.compile(r"^\s*DELETE\b", re.I | re.M), "deletes rows"),
]
ADD_COLUMN = re.compile(r"\bADD\s+COLUMN\b[^,;]*", re.I)
# Written before the policy (2026-11-29), each with what it did; never extended.
GRANDFATHERED = {
    "005_backend_neutral_names.sql": "renamed the subscription columns (release 0.1.0 needed a stop)",
    "011_device_index.sql": "replaced an index by a unique one",
    "021_row_bindings_everywhere.sql": "emptied two caches, which every release fills again by itself",
}


def without_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))


problems = []
for path in sorted(DIRECTORY.glob("*.sql")):
    name, text = path.name, path.read_text()
    sql = without_comments(text)
    if CONTRACT_NAME.match(name):
        if not CONTRACT_HEADER.search(text):
            problems.append(f"{name}: a contract step must say '-- contract: requires release X.Y.Z' (the release every host runs first)")
        continue
    if "_contract_" in name:
        problems.append(f"{name}: a contract step is named NNN_contract_<what>.sql (lowercase, digits, underscores)")
        continue
    if name in GRANDFATHERED:
        continue
    for pattern, what in BREAKING:
        if pattern.search(sql):
            problems.append(f"{name}: {what}, which breaks the previous release's binaries; make it a contract step "
                            "(NNN_contract_<what>.sql with '-- contract: requires release X.Y.Z')")
    if not name.startswith("001_"):
        for clause in ADD_COLUMN.findall(sql):
            if re.search(r"\bNOT\s+NULL\b", clause, re.I) and not re.search(r"\bDEFAULT\b", clause, re.I):
                problems.append(f"{name}: adds a NOT NULL column without a default, which the previous release's INSERTs "
                                f"cannot fill: {' '.join(clause.split())[:80]}")
if problems:
    print("lint: migrations that do not only expand:")
    print("\n".join(problems))
    sys.exit(1)
print(f"check_migrations: OK ({len(list(DIRECTORY.glob('*.sql')))} migrations; every one expands, or is a contract step)")
