#!/usr/bin/env python3
"""What the NotificationLog row's shape costs MariaDB per Exchange callback.

Replays `b6-floor.py`'s `row-each` (the joined read, the reservation, one log row) with the
log row going to copies of NotificationLog in other shapes, each filled with the bench
stack's own rows and each insert for a random device, and reports mariadbd's CPU per
callback for each (3 rounds, alternating):

  shipped     as migration 007 made it: a random 16-byte key, three secondary indexes,
              the foreign key to Devices
  no-fk       without the foreign key
  by-device   keyed by (device, time, id) with the id unique, so a device's rows sit
              together and the (device, time) index is the table itself
  fewer-keys  without the time and content-expiry indexes (the reaper's)
  no-row      the read and the reservation alone: what the row costs in all

Usage: bench/lab/b6-log-shapes.py ITERATIONS [RATE]   (ENS_VAR names the stack; run after
bench/b6-callbacks.sh set it up). The copies are dropped afterwards; nothing of ENS's
tables changes but the reservation's counters, as in b6-floor.py.
"""
import importlib.util
import os
import random
import sys

spec = importlib.util.spec_from_file_location("b6_floor", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "b6-floor.py"))
floor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(floor)  # exits with its message when the connector is missing

COLUMNS = ("id BINARY(16) NOT NULL, device_id BIGINT UNSIGNED NOT NULL, created_at DATETIME(3) NOT NULL, "
           "summary_sealed VARBINARY(2048) NULL, content_sealed VARBINARY(8192) NULL, content_expires_at DATETIME(3) NULL, "
           "read_at DATETIME(3) NULL")
DEVICE_INDEX = "KEY ix_log_device (device_id, created_at)"
REAPER_INDEXES = "KEY ix_log_created (created_at), KEY ix_log_content_expiry (content_expires_at)"


def foreign_key(name):
    return f"CONSTRAINT fk_{name} FOREIGN KEY (device_id) REFERENCES Devices (id) ON DELETE CASCADE"


SHAPES = {
    "shipped": f"{COLUMNS}, PRIMARY KEY (id), {DEVICE_INDEX}, {REAPER_INDEXES}, {foreign_key('bench_shipped')}",
    "no-fk": f"{COLUMNS}, PRIMARY KEY (id), {DEVICE_INDEX}, {REAPER_INDEXES}",
    "by-device": f"{COLUMNS}, PRIMARY KEY (device_id, created_at, id), UNIQUE KEY uq_log_id (id), {REAPER_INDEXES}, "
                 f"{foreign_key('bench_by_device')}",
    "fewer-keys": f"{COLUMNS}, PRIMARY KEY (id), {DEVICE_INDEX}, {foreign_key('bench_fewer_keys')}",
}


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    db, sql = floor.connect()
    ddl = db.cursor()
    tables = {name: "bench_log_" + name.replace("-", "_") for name in SHAPES}
    for name, definition in SHAPES.items():
        ddl.execute(f"DROP TABLE IF EXISTS {tables[name]}")
        ddl.execute(f"CREATE TABLE {tables[name]} ({definition}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
        ddl.execute(f"INSERT INTO {tables[name]} SELECT id, device_id, created_at, summary_sealed, content_sealed, "
                    "content_expires_at, read_at FROM NotificationLog")
    rows = sql("SELECT COUNT(*) FROM NotificationLog")[0][0]
    record = sql("SELECT r.id FROM EnsSubscriptionInfo r JOIN Devices d ON d.subscription_row = r.id "
                 "WHERE r.mail_backend = 'ews' AND r.subscription_id IS NOT NULL LIMIT 1")[0][0]
    devices = [row[0] for row in sql("SELECT id FROM Devices")]
    summary = bytes(120)

    def read_and_reserve():
        sql(floor.MERGED, (record,))
        stamp = floor.now()
        sql(floor.RESERVE, (stamp, 1, stamp, stamp, stamp, None, record, stamp, 1, 1_000_000))

    def logging_to(table):
        statement = floor.LOG.replace("NotificationLog", table)

        def run():
            read_and_reserve()
            sql(statement, (os.urandom(16), random.choice(devices), floor.now(), summary, None, None))
        return run

    arrangements = {name: logging_to(table) for name, table in tables.items()}
    arrangements["no-row"] = read_and_reserve
    try:
        results = floor.measure(arrangements, iterations, rate)
    finally:
        for table in tables.values():
            ddl.execute(f"DROP TABLE IF EXISTS {table}")
    paced = f" at {rate:g}/s" if rate else ""
    for name, values in results.items():
        print(f"B6-log-shapes {name:10s}{paced} ({rows:,} rows) MariaDB CPU ms per callback: "
              + ", ".join(f"{v:.3f}" for v in values) + f" (median {sorted(values)[1]:.3f})")


if __name__ == "__main__":
    main()
