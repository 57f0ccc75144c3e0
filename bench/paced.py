#!/usr/bin/env python3
"""Replays B6's callbacks at Poisson times instead of back to back, as the capacity
bench paces them: each request then wakes idle processes, which is where a stack at
its real load spends its CPU.

  bench/paced.py REQUESTS RATE SECONDS

REQUESTS is bench/devices.py b6-setup's file (a callback path, a tab, its body's file
per line); RATE callbacks a second for SECONDS. Prints "rps p50 p99 unexpected" (the
latencies in ms, from each request's due time); the unexpected answers' first lines go
to standard error. Environment: ENS_VAR, ENS_PORT (the stack), PACED_CONNECTIONS
(default 16, kept alive).
"""
import http.client
import os
import queue
import random
import ssl
import sys
import threading
import time

VAR, PORT = os.environ["ENS_VAR"], int(os.environ["ENS_PORT"])


def connection():
    context = ssl.create_default_context(cafile=f"{VAR}/tls/server.crt")
    return http.client.HTTPSConnection("localhost", PORT, context=context)


def main(path, rate, seconds):
    requests = []
    for line in open(path):
        if line.strip():
            target, body = line.rstrip("\n").split("\t")
            requests.append((target, open(body, "rb").read()))
    rng = random.Random()
    work, latencies, unexpected, lock = queue.Queue(), [], [0], threading.Lock()
    start = time.monotonic() + 0.5

    def worker():
        conn = connection()
        while (item := work.get()) is not None:
            due, (target, body) = item
            try:
                conn.request("POST", target, body=body, headers={"Content-Type": "text/xml; charset=utf-8"})
                answer = conn.getresponse()
                text = answer.read()
                good = answer.status == 200 and b">OK<" in text
                if not good:
                    print(f"unexpected answer: {answer.status} {text[:200]!r}", file=sys.stderr)
            except (OSError, http.client.HTTPException) as error:
                print(f"unexpected answer: {error!r}", file=sys.stderr)
                good, conn = False, connection()
            with lock:
                latencies.append((time.monotonic() - (start + due)) * 1000)
                unexpected[0] += 0 if good else 1

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(int(os.environ.get("PACED_CONNECTIONS", "16")))]
    for thread in threads:
        thread.start()
    due, index = rng.expovariate(rate), rng.randrange(len(requests))
    while due < seconds:
        delay = start + due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        index = (index + 1) % len(requests)
        work.put((due, requests[index]))
        due += rng.expovariate(rate)
    for _ in threads:
        work.put(None)
    for thread in threads:
        thread.join()
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    print(f"{len(latencies) / seconds:.2f} {pick(0.5):.2f}ms {pick(0.99):.2f}ms {unexpected[0]}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
