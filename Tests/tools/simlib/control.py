"""The control API: plain HTTP/1.1 with JSON bodies on a loopback port, through which
tests and benchmarks configure a simulator (failures, mailboxes, users, ...) and read
what it saw (stats, records). One connection per thread; it never touches the protocol
port's event loop except through the simulator's lock."""
import json
import re
import threading
import time
from collections import namedtuple
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A route's answer with a status other than 200.
Answer = namedtuple("Answer", "status obj")


class ControlHandler(BaseHTTPRequestHandler):
    """The base of a simulator's control handler; `max_body` bounds what read() takes
    (None: the whole Content-Length)."""
    protocol_version = "HTTP/1.1"
    max_body = None

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read(self):
        """The request body; b"" when Content-Length is missing, malformed or over max_body."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if length <= 0 or (self.max_body is not None and length > self.max_body):
            return b""
        return self.rfile.read(length)

    def route(self):
        return self.path.split("?", 1)[0]

    def get_json(self, routes):
        """GET: routes maps a path (query ignored) to a function of no arguments whose
        answer is sent with 200; another path is 404."""
        handler = routes.get(self.route())
        if handler is None:
            return self.reply(404, {"error": "not found"})
        self.reply(200, handler())

    def post_json(self, routes):
        """POST: routes maps a path (query ignored) to a function of the request, a JSON
        object (an empty body is {}); its answer is sent with 200, or as an Answer with
        that status. LookupError means 404 and ValueError, TypeError or AttributeError
        400, each with {"error": its text}; another path is 404."""
        handler = routes.get(self.route())
        if handler is None:
            return self.reply(404, {"error": "not found"})
        try:
            raw = self.read()
            req = json.loads(raw) if raw.strip() else {}
            if not isinstance(req, dict):
                raise ValueError("the body must be a JSON object")
            answer = handler(req)
        except LookupError as e:
            return self.reply(404, {"error": str(e)})
        except (ValueError, TypeError, AttributeError) as e:
            return self.reply(400, {"error": str(e)})
        if isinstance(answer, Answer):
            return self.reply(answer.status, answer.obj)
        self.reply(200, answer)

    def log_message(self, *args):
        pass


def locked(lock, read):
    """A GET route that runs read() under the simulator's lock."""
    def answer():
        with lock:
            return read()
    return answer


def control_server(port, handler):
    """The control server on 127.0.0.1:port (listening on return); run it with
    process.serve_in_threads."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    return server


class Waiters:
    """Lets GET /wait sleep until a count reaches a target, woken by the request that
    reaches it: a waiter that polled would take the GIL from the event loop it is
    measuring. Shares the simulator's lock, under which the count changes."""

    def __init__(self, lock):
        self.changed = threading.Condition(lock)
        self.targets = []
        self.wake_at = None  # the smallest target of any waiter

    def wait(self, count, target, seconds):
        """Returns once count() (called with the lock held) reaches target, or after
        `seconds`; the caller must not hold the lock."""
        deadline = time.monotonic() + seconds
        with self.changed:
            self.targets.append(target)
            self.wake_at = min(self.targets)
            try:
                while count() < target and (left := deadline - time.monotonic()) > 0:
                    self.changed.wait(left)
            finally:
                self.targets.remove(target)
                self.wake_at = min(self.targets, default=None)

    def counted(self, value):
        """The count is now `value`; the caller holds the lock."""
        if self.wake_at is not None and value >= self.wake_at:
            self.changed.notify_all()


class StatsHandler(ControlHandler):
    """GET /stats (sim.stats()) and GET /wait?accepted=N&timeout=S (the same answer
    once sim.accepted reaches N, or after S seconds) for a simulator `sim` with a lock
    and Waiters `waiters`."""
    sim = None

    def do_GET(self):
        sim = self.sim
        if self.path == "/stats":
            return self.reply(200, sim.stats())
        match = re.fullmatch(r"/wait\?accepted=(\d{1,9})&timeout=(\d{1,4})", self.path)
        if match:
            # A benchmark waits here instead of polling /stats from a shell loop,
            # which would take CPU from what it measures.
            sim.waiters.wait(lambda: sim.accepted, int(match.group(1)), int(match.group(2)))
            return self.reply(200, sim.stats())
        self.reply(404, {"error": "not found"})
