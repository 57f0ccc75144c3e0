#!/usr/bin/env python3
"""make lint: every column the migrations leave names its protection in the inventory.

Replays the migrator's own table and sql/migrations/*.sql in order (CREATE TABLE, ALTER TABLE ... ADD/DROP/RENAME/
CHANGE COLUMN, RENAME/DROP TABLE) into the schema they leave, then compares it with
Sources/ENSStore/ColumnInventory.swift both ways: a column a migration adds that the
inventory does not name fails, and so does an inventory entry no migration leaves.
IntegrationTests/InventoryTests makes the same comparison against the live schema.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "sql" / "migrations"
INVENTORY = ROOT / "Sources" / "ENSStore" / "ColumnInventory.swift"
# The migrator makes its own table (schema_migrations) before the first migration.
MIGRATOR = ROOT / "Sources" / "ENSStore" / "Migrator.swift"

NAME = r"`?([A-Za-z_][A-Za-z0-9_]*)`?"
NOT_COLUMNS = {"PRIMARY", "KEY", "UNIQUE", "INDEX", "CONSTRAINT", "FOREIGN", "FULLTEXT", "CHECK"}


def statements(text):
    text = re.sub(r"--[^\n]*", "", text)
    return [s.strip() for s in text.split(";") if s.strip()]


def split_top_level(body):
    """Splits on commas outside parentheses."""
    parts, depth, current = [], 0, []
    for character in body:
        if character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
        if character == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(character)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def replay():
    schema = {}
    migrator = re.findall(r'"""\s*(CREATE TABLE IF NOT EXISTS schema_migrations.*?)"""', MIGRATOR.read_text(), re.S)
    sources = [migrator[0]] if migrator else []
    sources += [path.read_text() for path in sorted(MIGRATIONS.glob("*.sql"))]
    for text in sources:
        for statement in statements(text):
            flat = " ".join(statement.split())
            created = re.match(r"CREATE TABLE (?:IF NOT EXISTS )?" + NAME + r" \((.*)\)", flat, re.I | re.S)
            if created:
                table, body = created.group(1), created.group(2)
                columns = schema.setdefault(table, [])
                for part in split_top_level(body):
                    word = re.match(NAME, part)
                    if word and word.group(1).upper() not in NOT_COLUMNS and word.group(1) not in columns:
                        columns.append(word.group(1))
                continue
            renamed_table = re.match(r"RENAME TABLE " + NAME + r" TO " + NAME, flat, re.I)
            if renamed_table:
                schema[renamed_table.group(2)] = schema.pop(renamed_table.group(1), [])
                continue
            dropped_table = re.match(r"DROP TABLE (?:IF EXISTS )?" + NAME, flat, re.I)
            if dropped_table:
                schema.pop(dropped_table.group(1), None)
                continue
            altered = re.match(r"ALTER TABLE " + NAME + r" (.*)", flat, re.I | re.S)
            if not altered:
                continue
            table = altered.group(1)
            columns = schema.setdefault(table, [])
            for clause in split_top_level(altered.group(2)):
                added = re.match(r"ADD (?:COLUMN )?(?:IF NOT EXISTS )?" + NAME, clause, re.I)
                if added and added.group(1).upper() not in NOT_COLUMNS:
                    if added.group(1) not in columns:
                        columns.append(added.group(1))
                    continue
                dropped = re.match(r"DROP (?:COLUMN )?(?:IF EXISTS )?" + NAME, clause, re.I)
                if dropped and dropped.group(1).upper() not in NOT_COLUMNS and not re.match(r"DROP (INDEX|KEY|PRIMARY|FOREIGN)", clause, re.I):
                    if dropped.group(1) in columns:
                        columns.remove(dropped.group(1))
                    continue
                moved = re.match(r"RENAME COLUMN (?:IF EXISTS )?" + NAME + r" TO " + NAME, clause, re.I) or \
                    re.match(r"CHANGE (?:COLUMN )?(?:IF EXISTS )?" + NAME + r" " + NAME, clause, re.I)
                if moved:
                    old, new = moved.group(1), moved.group(2)
                    if old in columns:
                        columns[columns.index(old)] = new
                    elif new not in columns:
                        columns.append(new)
    return {(table, column) for table, columns in schema.items() for column in columns}


def inventory():
    named, table = set(), None
    for line in INVENTORY.read_text().splitlines():
        opened = re.match(r'\s*\("([A-Za-z_]+)", \[$', line)
        if opened:
            table = opened.group(1)
            continue
        entry = re.match(r'\s*\("([A-Za-z_0-9]+)", \.(bound|mac|sealed|inert|gap)\b', line)
        if entry and table:
            named.add((table, entry.group(1)))
    return named


def main():
    migrated, named = replay(), inventory()
    if not named:
        print("check_inventory: no entries read from " + str(INVENTORY.relative_to(ROOT)))
        return 1
    missing = sorted(migrated - named)
    stale = sorted(named - migrated)
    for table, column in missing:
        print(f"check_inventory: {table}.{column} is added by a migration but not named in ColumnInventory.swift "
              "(say whether it is bound, sealed or inert, and why)")
    for table, column in stale:
        print(f"check_inventory: ColumnInventory.swift names {table}.{column}, which no migration leaves")
    if missing or stale:
        return 1
    print(f"check_inventory: OK ({len(named)} columns in {len({t for t, _ in named})} tables, each with its protection)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
