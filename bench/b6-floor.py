#!/usr/bin/env python3
"""B6's MariaDB floor: what MariaDB itself spends per Exchange new-mail callback.

Replays, on a bench stack's own database and one of its registered records, the
statements a callback runs (the same SQL text, as server-side prepared statements, one
connection, one after another), in several arrangements, and reports MariaDB's CPU per
callback for each (from /proc, mariadbd only; this client is not counted):

  before       the record, its devices, the reservation, a log row: each write its own commit
  transaction  the record and its devices in one SELECT, then the reservation and the log
               row in one transaction (one commit, but START and COMMIT are statements too)
  row-each     the record and its devices in one SELECT, then the two writes, each its own
               commit (what ENS did from 2026-11-28 to 0.4.0)
  now          the record and its devices in one SELECT, then the reservation (what ENS does
               since 0.5.0: the log rows go in ens-sender's batches, a few a second)
  plain-read   as `now`, but the read is `least`'s: what the joined read costs over it
  plain-write  as `now`, but the write is `least`'s: what the reservation costs over it
  one-trip     as `row-each`, but the two writes in one round trip: a procedure (made for the
               run and dropped after it) called as one prepared statement
  one-commit   as `one-trip`, the procedure's two writes in one transaction
  least        one SELECT of the record by key and one UPDATE of it by key (autocommit):
               less than any callback can do (it must read the record and durably record
               the callback), so no arrangement of ENS's statements costs MariaDB less

Usage: b6-floor.py ITERATIONS [RATE]   (ENS_VAR names the stack; run after bench/b6-callbacks.sh
set it up). Without RATE the callbacks follow one another at once; with it they arrive
at Poisson times at RATE a second, as the capacity bench sends them, so MariaDB's cost
per callback at that pace shows (a lone statement wakes an idle server each time; back
to back, one wakeup serves many). The statements change nothing a later run depends on:
the reservation's
window is lifted (ENS_MAX_NOTIFICATIONS_PER_MINUTE), and the log rows it adds belong to
one bench device (ens-cron reap trims them like any other). B6_FLOOR_ONLY=least (or
other names, comma-separated) runs those arrangements alone.

It talks to MariaDB through MySQL Connector/Python's prepared cursor (server-side
prepared statements, as ENS uses). MariaDB's own Connector/Python 1.1.14, used until
2026-11-28, runs no statement on a prepared cursor after its first SELECT while
reporting each done: every write was dropped, and the figures before that date count
the reads alone.
"""
import os
import random
import sys
import time

try:
    import mysql.connector
except ImportError:
    sys.exit("b6-floor.py needs MySQL Connector/Python: python3 -m pip install mysql-connector-python")

VAR = os.environ["ENS_VAR"]
HZ = os.sysconf("SC_CLK_TCK")
DEVICE_COLUMNS = ("id, token_hash, bundle_id, default_sound, ews_device_id, badge, development, disabled_at, "
                  "last_notified_at, privacy_mode, preview_key, endpoint, secret_hash")
RECORD = """SELECT id, userid, generation, pending_generation, pending_started_at, mail_backend, subscription_id, watermark,
    backend_url, backend_version, backend_tenant, endpoint, binding_mac, private_key_sealed, notify_count, notify_window_started_at,
    (SELECT c.sealed FROM MailCredentials c WHERE c.record_id = EnsSubscriptionInfo.id AND c.generation = EnsSubscriptionInfo.generation
     AND NOT EXISTS (SELECT 1 FROM MailCredentialsFresh f WHERE f.record_id = c.record_id AND f.generation = c.generation))
    FROM EnsSubscriptionInfo WHERE id = ?"""
DEVICES = f"""SELECT {DEVICE_COLUMNS}, token_sealed, sync_key_sealed, sync_key_expires_at
    FROM Devices FORCE INDEX (uq_device_token)
    WHERE subscription_row = ? AND disabled_at IS NULL AND endpoint <=> ? ORDER BY last_checkin_at DESC, id LIMIT ?"""
MERGED = f"""SELECT r.id, r.userid, r.generation, r.pending_generation, r.pending_started_at, r.mail_backend, r.subscription_id,
    r.watermark, r.backend_url, r.backend_version, r.backend_tenant, r.endpoint, r.binding_mac, r.private_key_sealed, r.notify_count,
    r.notify_window_started_at,
    (SELECT c.sealed FROM MailCredentials c WHERE c.record_id = r.id AND c.generation = r.generation
     AND NOT EXISTS (SELECT 1 FROM MailCredentialsFresh f WHERE f.record_id = c.record_id AND f.generation = c.generation)),
    {", ".join("d." + c.strip() for c in (DEVICE_COLUMNS + ", token_sealed, sync_key_sealed, sync_key_expires_at").split(","))}
, d.last_checkin_at
    FROM EnsSubscriptionInfo r
    LEFT JOIN Devices d FORCE INDEX (uq_device_token)
      ON d.subscription_row = r.id AND d.disabled_at IS NULL AND d.endpoint <=> r.endpoint
    WHERE r.id = ?"""
RESERVE = """UPDATE EnsSubscriptionInfo SET
    notify_count = IF(notify_window_started_at > ?, notify_count, 0) + ?,
    notify_window_started_at = IF(notify_window_started_at > ?, notify_window_started_at, ?),
    last_callback_at = ?, watermark = COALESCE(?, watermark)
    WHERE id = ? AND IF(notify_window_started_at > ?, notify_count, 0) + ? <= ?"""
LOG = """INSERT INTO NotificationLog (id, device_id, created_at, summary_sealed, content_sealed, content_expires_at)
    VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id"""
LEAST_SELECT = "SELECT id, generation, endpoint FROM EnsSubscriptionInfo WHERE id = ?"
LEAST_UPDATE = "UPDATE EnsSubscriptionInfo SET last_callback_at = ? WHERE id = ?"


def with_names(statement, names):
    """`statement` with its placeholders replaced, in order, by `names` (a procedure's)."""
    parts = statement.split("?")
    assert len(parts) == len(names) + 1, "one name per placeholder"
    return "".join(part + name for part, name in zip(parts, names)) + parts[-1]


def mariadb_ticks():
    pid = open(f"{VAR}/run/mysqld.pid").read().strip()
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def connect():
    """The stack's database, and a function running one statement on it, prepared."""
    db = mysql.connector.connect(unix_socket=f"{VAR}/run/mysqld.sock", user="root", database="ens", autocommit=True)
    # One prepared cursor per statement, prepared once, as ENS's connections keep
    # theirs: Connector/Python prepares again whenever a cursor's statement changes.
    cursors = {}

    def sql(statement, params=()):
        cursor = cursors.get(statement)
        if cursor is None:
            cursor = cursors[statement] = db.cursor(prepared=True)
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.with_rows else None
    return db, sql


def now():
    """The time in milliseconds, as ENS writes it: each write then changes its row (a
    timestamp repeated within a second would leave it as it was, and InnoDB commits an
    unchanged row for almost nothing)."""
    stamp = time.time()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp)) + f".{int(stamp * 1000) % 1000:03d}"


def measure(arrangements, iterations, rate):
    """mariadbd's CPU ms per callback of each arrangement (name: function running one
    callback), 3 rounds each, alternating so that a change in the host's speed falls on
    all; back to back, or at Poisson times at `rate` a second."""
    for run in arrangements.values():  # prepared once, warm
        for _ in range(50):
            run()
    pace = random.Random(32)
    results = {name: [] for name in arrangements}
    for _ in range(3):
        for name, run in arrangements.items():
            start = mariadb_ticks()
            due = time.monotonic()
            for _ in range(iterations):
                if rate:
                    due += pace.expovariate(rate)
                    time.sleep(max(0.0, due - time.monotonic()))
                run()
            results[name].append((mariadb_ticks() - start) / HZ * 1000 / iterations)
    return results


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    db, sql = connect()
    record, endpoint, device = sql("SELECT r.id, r.endpoint, d.id FROM EnsSubscriptionInfo r JOIN Devices d ON d.subscription_row = r.id "
                                   "WHERE r.mail_backend = 'ews' AND r.subscription_id IS NOT NULL LIMIT 1")[0]
    summary = bytes(120)

    def reserve():
        t = now()
        sql(RESERVE, (t, 1, t, t, t, None, record, t, 1, 1_000_000))

    def log():
        sql(LOG, (os.urandom(16), device, now(), summary, None, None))  # a new row, as a new mail makes

    def read(query, params):
        sql(query, params)

    def before():
        read(RECORD, (record,))
        read(DEVICES, (record, endpoint, 20))
        reserve()
        log()

    def transaction():
        read(MERGED, (record,))
        sql("START TRANSACTION")
        reserve()
        log()
        sql("COMMIT")

    def row_each():
        read(MERGED, (record,))
        reserve()
        log()

    def current():
        read(MERGED, (record,))
        reserve()

    def plain_read():
        read(LEAST_SELECT, (record,))
        reserve()

    def plain_write():
        read(MERGED, (record,))
        sql(LEAST_UPDATE, (now(), record))

    # `one-trip`: the two writes in one round trip, a procedure called as one prepared
    # statement (what ENS would need a migration and EXECUTE for); made here for the
    # run and dropped after it. Like `row-each`, it writes the log row whatever the
    # reservation did (ENS would write it only when the reservation held).
    # The time goes in as DATETIME(3), as ENS writes it: a DATETIME (whole seconds) left
    # most reservations within a second unchanged, which InnoDB commits for almost
    # nothing, and made `one-trip` look 0.17 ms cheaper than it is (the capacity work's
    # fifth round).
    ddl = db.cursor()
    writes = (f"{with_names(RESERVE, ('t', 'n', 't', 't', 't', 'NULL', 'rec', 't', 'n', 'cap'))}; "
              f"{with_names(LOG, ('log_id', 'dev', 't', 'summary', 'NULL', 'NULL'))};")
    for procedure, body in (("bench_reserve_and_log", writes), ("bench_reserve_and_log_tx", f"START TRANSACTION; {writes} COMMIT;")):
        ddl.execute(f"DROP PROCEDURE IF EXISTS {procedure}")
        ddl.execute(f"""CREATE PROCEDURE {procedure}(IN t DATETIME(3), IN n INT, IN cap INT, IN rec BIGINT,
            IN log_id BINARY(16), IN dev BIGINT, IN summary BLOB) BEGIN {body} END""")

    def call(procedure):
        def run():
            read(MERGED, (record,))
            sql(f"CALL {procedure}(?, ?, ?, ?, ?, ?, ?)", (now(), 1, 1_000_000, record, os.urandom(16), device, summary))
        return run

    def least():
        read(LEAST_SELECT, (record,))
        sql(LEAST_UPDATE, (now(), record))

    arrangements = {"before": before, "transaction": transaction, "row-each": row_each, "one-trip": call("bench_reserve_and_log"),
                    "one-commit": call("bench_reserve_and_log_tx"), "now": current, "plain-read": plain_read,
                    "plain-write": plain_write, "least": least}
    if only := os.environ.get("B6_FLOOR_ONLY"):  # some arrangements, by name
        arrangements = {name: arrangements[name] for name in only.split(",")}
    results = measure(arrangements, iterations, rate)
    ddl.execute("DROP PROCEDURE bench_reserve_and_log")
    ddl.execute("DROP PROCEDURE bench_reserve_and_log_tx")
    for name, values in results.items():
        paced = f" at {rate:g}/s" if rate else ""
        print(f"B6-floor {name:11s}{paced} MariaDB CPU ms per callback: " + ", ".join(f"{v:.3f}" for v in values)
              + f" (median {sorted(values)[1]:.3f})")


if __name__ == "__main__":
    main()
