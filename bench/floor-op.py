#!/usr/bin/env python3
"""One part of the capacity floor done by itself: ms of CPU per operation.

  floor-op.py sync DIR [RATE [COUNT]]   a 1 KB append to a scratch file in DIR (the
                                        spool's directory: the same file system and
                                        disk) and its fdatasync
  floor-op.py rsa [RATE [COUNT]]        one RSA-2048 private-key operation (a PKCS#1
                                        v1.5 signature, Python's `cryptography`, i.e.
                                        OpenSSL), as a check-in opens its sealed token

COUNT operations (default 3000 back to back, as many as given when paced), each on its
own; prints the ms of CPU (user + system, from this process's rusage) per operation.
Back to back without RATE; with RATE, at Poisson times RATE a second (seeded, so runs
compare), as ENS meets them at the capacity bench's pace: each operation then also pays
for the wakeup that brings it and for caches gone cold meanwhile, which no process
serving paced requests avoids.

Used by bench/capacity-floor.sh (both ways) and bench/b4-push.sh (sync, back to back).
"""
import atexit
import os
import random
import resource
import sys
import time


def sync(directory):
    path = os.path.join(directory, f"floor-sync.{os.getpid()}.tmp")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    # Removed when this process ends, not now: a file with no name might be synced
    # for less, and the spool's files have names.
    atexit.register(os.unlink, path)
    record = os.urandom(1024)

    def append():
        os.write(fd, record)
        os.fdatasync(fd)
    return append


def rsa():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa as keys
    key = keys.generate_private_key(public_exponent=65537, key_size=2048)
    message = os.urandom(32)
    return lambda: key.sign(message, padding.PKCS1v15(), hashes.SHA256())


def main():
    args = sys.argv[1:]
    kinds = {"sync": 1, "rsa": 0}
    if not args or args[0] not in kinds or len(args) < 1 + kinds[args[0]]:
        sys.exit(__doc__)
    kind, args = args[0], args[1:]
    operation = sync(args.pop(0)) if kind == "sync" else rsa()
    rate = float(args[0]) if args else 0.0
    count = int(args[1]) if len(args) > 1 else 3000
    operation()  # warm: the first one pays for loading and first touches
    pace = random.Random(46)
    before = resource.getrusage(resource.RUSAGE_SELF)
    due = time.monotonic()
    for _ in range(count):
        if rate > 0:
            due += pace.expovariate(rate)
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        operation()
    after = resource.getrusage(resource.RUSAGE_SELF)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{used * 1000 / count:.4f}")


if __name__ == "__main__":
    main()
