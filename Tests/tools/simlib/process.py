"""A simulator's life as a process: the scripts that start one (scripts/stack.sh, the
self-tests) wait for its --ready-file, which holds its PID once every port listens, and
stop it with SIGTERM (or SIGINT), after which it must exit promptly with status 0 and
remove the ready file."""
import contextlib
import os
import signal
import threading
import time


def exit_on_signal(signum, frame):
    raise SystemExit(0)


@contextlib.contextmanager
def running(ready_file):
    """Writes the ready file (atomically) on entry, after the caller bound its ports;
    SIGTERM and SIGINT end the body with SystemExit(0); the ready file goes on exit."""
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)
    if ready_file:
        with open(ready_file + ".tmp", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(ready_file + ".tmp", ready_file)
    try:
        yield
    finally:
        if ready_file:
            try:
                os.unlink(ready_file)
            except OSError:
                pass


def wait_for_signal():
    """Blocks the main thread until SIGTERM or SIGINT (which raise SystemExit in it)
    while the servers run in their own threads."""
    while True:
        time.sleep(3600)


def serve_in_threads(servers):
    """Runs each server's serve_forever in a daemon thread: the process ends with its
    main thread, whatever the servers are doing."""
    for server in servers:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25},
                         daemon=True).start()
