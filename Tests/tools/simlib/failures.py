"""Failure injection: the answers a test told a simulator (through its control API) to
give instead of the real ones, so that ENS's handling of provider errors and outages can
be tested without a provider that fails on demand."""
import threading


class Failures:
    """key (a device token, an operation, ...) -> an injected failure, for the next
    `count` requests that reach the point where the simulator takes it, or until cleared
    when count is 0. A later injection for the same key replaces the earlier one. The
    failure itself is the simulator's (a tuple or dict of what to answer)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.table = {}  # key -> [failure, remaining or None]

    def inject(self, key, failure, count=0):
        with self.lock:
            self.table[key] = [failure, count or None]

    def take(self, *keys):
        """The failure injected for the first of `keys` that has one, counted as used;
        None when none has."""
        with self.lock:
            for key in keys:
                entry = self.table.get(key)
                if entry is None:
                    continue
                if entry[1] is not None:
                    entry[1] -= 1
                    if entry[1] <= 0:
                        del self.table[key]
                return entry[0]
        return None

    def clear(self):
        with self.lock:
            self.table.clear()
