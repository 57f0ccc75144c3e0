"""What the simulators' self-tests share: counted checks, starting and stopping a
simulator the way scripts/stack.sh does (--ready-file, SIGTERM), its control API, an
HTTP/2 client (for APNs and FCM) and an HTTPS receiver standing in for ENS's callback
endpoint (for EWS and Graph).

A self-test prints one summary line last (scripts/test.sh shows only that line) and
exits 0 only when every check passed."""
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer

import h2.config
import h2.connection
import h2.events

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = 0


class Failed(Exception):
    pass


def check(cond, what):
    global CHECKS
    CHECKS += 1
    if not cond:
        raise Failed(what)


def expect(what, got, want):
    check(got == want, f"{what}: got {got!r}, want {want!r}")


def main(name, run, log_name=None):
    """Runs run(tmp) in a fresh temporary directory; prints the summary line and, when
    a check failed, the tail of the simulator's log (tmp/log_name). Returns the exit
    status."""
    tmp = tempfile.mkdtemp(prefix=name.replace(" ", "-") + "-")
    t0 = time.monotonic()
    try:
        run(tmp)
    except Failed as e:
        log = os.path.join(tmp, log_name) if log_name else None
        if log and os.path.exists(log):
            with open(log, errors="replace") as f:
                sys.stderr.write("--- simulator log (tail) ---\n" + "".join(f.readlines()[-30:]))
        print(f"{name} self-test: FAILED after {CHECKS} checks: {e}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{name} self-test: {CHECKS} checks passed ({time.monotonic() - t0:.1f} s)")
    return 0


def simulator(script):
    """The command line that starts Tests/tools/<script>, as scripts/stack.sh runs it."""
    return [sys.executable, os.path.join(HERE, script)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def wait_for(pred, timeout, what):
    """pred()'s first true value, polled until `timeout` seconds passed (a bound on a
    hang, not a check of speed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise Failed(f"timed out waiting for {what}")


def start(cmd, ready, **popen):
    """Starts a simulator and waits for its ready file, which must hold its PID."""
    proc = subprocess.Popen(cmd, **popen)
    try:
        wait_for(lambda: os.path.exists(ready) or proc.poll() is not None, 20, "the ready file")
        check(proc.poll() is None, "simulator started")
        with open(ready) as f:
            expect("ready file holds the PID", f.read().strip(), str(proc.pid))
    except Failed:
        proc.kill()
        proc.wait()
        raise
    return proc


def stop(proc, ready, signum=signal.SIGTERM):
    """Stops a simulator as scripts/stack.sh does: it must exit with status 0 and remove
    its ready file."""
    proc.send_signal(signum)
    expect(f"exit status after {signal.Signals(signum).name}", proc.wait(timeout=10), 0)
    check(not os.path.exists(ready), "ready file removed on exit")


def control(port, method, path, obj=None, expect_status=200):
    """A control API call; checks its status and returns the JSON answer."""
    status, answer = control_call(port, method, path, obj)
    expect(f"control {method} {path} {obj} status ({answer})", status, expect_status)
    return answer


def control_call(port, method, path, obj=None):
    """A control API call -> (status, JSON answer)."""
    data = json.dumps(obj).encode() if obj is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def hang_up_on(sock):
    """Reads until the server closes the connection (or 5 s of silence): what a
    simulator does with a client that sent it garbage."""
    sock.settimeout(5)
    try:
        while sock.recv(4096):
            pass
    except (OSError, ssl.SSLError):
        pass


class H2Client:
    """A minimal HTTP/2 client over TLS to 127.0.0.1 (verified as "localhost"): sends
    many requests at once, honouring flow control, and collects their responses."""

    def __init__(self, port, cafile, alpn=("h2",)):
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.set_alpn_protocols(list(alpn))
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle wait between frames
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.responses = {}

    def close(self):
        self.sock.close()

    def pump(self):
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("server closed the connection")
        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.ResponseReceived):
                self.responses[ev.stream_id] = [dict(ev.headers), b""]
            elif isinstance(ev, h2.events.DataReceived):
                self.responses[ev.stream_id][1] += ev.data
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self.responses[ev.stream_id].append("done")
        self.sock.sendall(self.conn.data_to_send())

    def request_many(self, requests):
        """requests: list of (headers list, body bytes). Returns [(status, headers, body)]."""
        ids, unsent = [], {}
        for headers, body in requests:
            sid = self.conn.get_next_available_stream_id()
            self.conn.send_headers(sid, headers, end_stream=not body)
            ids.append(sid)
            if body:
                unsent[sid] = memoryview(body)
        self.sock.sendall(self.conn.data_to_send())
        while unsent:
            progressed = False
            for sid in list(unsent):
                window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
                if window <= 0:
                    continue
                chunk, rest = unsent[sid][:window], unsent[sid][window:]
                self.conn.send_data(sid, bytes(chunk), end_stream=not rest)
                progressed = True
                if rest:
                    unsent[sid] = rest
                else:
                    del unsent[sid]
            self.sock.sendall(self.conn.data_to_send())
            if not progressed:
                self.pump()
        while not all(len(self.responses.get(s, ())) == 3 for s in ids):
            self.pump()
        out = []
        for s in ids:
            headers, body, _ = self.responses.pop(s)
            out.append((int(headers[":status"]), headers, body))
        return out

    def request(self, headers, body):
        return self.request_many([(headers, body)])[0]


def check_load(client, port, cafile, busy, rounds, light, connections):
    """Every answer 200: `rounds` times 500 `busy` requests in flight at once on client
    (which is closed then), then `connections` connections at once with 100 `light`
    requests each. busy and light are (headers, body)."""
    t0 = time.time()
    for _ in range(rounds):
        results = client.request_many([busy] * 500)
        expect("500 concurrent streams", {r[0] for r in results}, {200})
    print(f"{rounds * 500} requests on one connection in {time.time() - t0:.2f} s")
    client.close()
    errors = []

    def worker():
        try:
            w = H2Client(port, cafile)
            if {r[0] for r in w.request_many([light] * 100)} != {200}:
                errors.append("non-200")
            w.close()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(f"{connections} parallel connections", errors, [])


def check_bad_clients(port, cafile, request, plain, after_preface):
    """Clients that do not speak HTTP/2 over TLS: each `plain` (bytes) sent on a bare
    TCP connection, one that offers only http/1.1 in ALPN (must not be answered), and
    each of `after_preface` sent after the connection preface; the caller then checks
    that the server still serves."""
    for data in plain:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(data)
            hang_up_on(s)
    try:
        H2Client(port, cafile, alpn=("http/1.1",)).request(*request)
        expect("http/1.1-only ALPN refused", "answered", "refused")
    except (ConnectionError, OSError, ssl.SSLError):
        pass
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["h2"])
    for garbage in after_preface:
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + garbage)
            hang_up_on(s)


class Receiver:
    """An HTTPS server on a free loopback port, standing in for ENS's callback endpoint
    (certfile is a self-signed "localhost" certificate, like ENS's nginx one); `handler`
    is its BaseHTTPRequestHandler class (port 0: any free one). A simulator that hangs
    up is no error."""

    def __init__(self, certfile, keyfile, handler, port=0):
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda *args: None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certfile, keyfile)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path):
        return f"https://localhost:{self.port}{path}"
