"""HTTP/2 over TLS on one event loop, for the simulators of push services (APNs, FCM).

Everything runs on one thread: a thread per connection made a simulator slower the more
connections a client opened (the threads hand the GIL to each other on every socket
call: h2load measured 4,800 requests/s on one connection and 2,800 on four), which would
penalise a client for spreading its streams the way Apple and Google recommend. TLS
runs through memory BIOs; one socket read is decrypted in full before HTTP/2 sees it, so
a client that writes each frame as its own TLS record (libcurl 7.x) costs a loop turn
per read, not per record.

The server: ALPN must select "h2" (a client that does not offer it is disconnected);
SETTINGS_MAX_CONCURRENT_STREAMS is 1000 (exceeding it is a protocol error and ends the
connection); receive windows are 1 MiB per stream and the connection window grows by
16 MiB; received data is acknowledged as it arrives; PING is answered. A malformed
connection (TLS, HTTP/2 or a simulator bug) ends only that connection; a client that
does not finish its TLS handshake within 10 s is dropped.

The application is an object with
    session(peer_certificate) -> any: called once a connection speaks HTTP/2, with the
        client certificate as ssl.SSLObject.getpeercert() gives it (empty without one);
    handle(headers, body, body_length, session) -> (response headers, response body):
        one complete request; headers maps each name (the first occurrence) to its value,
        body holds at most `max_body_kept` bytes, body_length counts all of them.
The response headers start with ":status"; the stream ends with the headers when the
body is empty, else with the body once the client's flow-control window takes it whole.
"""
import selectors
import socket
import ssl
import sys
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HANDSHAKE_SECONDS = 10


class ConnectionCount:
    """HTTP/2 connections established (since start or reset) and currently open."""

    def __init__(self):
        self.lock = threading.Lock()
        self.established, self.open = 0, 0

    def opened(self):
        with self.lock:
            self.established += 1
            self.open += 1

    def closed(self):
        with self.lock:
            self.open -= 1

    def reset(self):
        with self.lock:
            self.established = 0


class Connection:
    """One client connection, driven by H2Server.serve()."""

    def __init__(self, server, raw):
        self.server, self.raw = server, raw
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = server.context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.deadline = time.monotonic() + HANDSHAKE_SECONDS
        self.h2 = None
        self.session = None
        self.counted = False
        self.unsent = bytearray()
        # the client's first bytes until its preface is checked (strict_preface only)
        self.opening = bytearray() if server.strict_preface else None
        self.streams = {}  # stream id -> [headers dict, body bytearray, body length]
        self.pending = {}  # stream id -> response body waiting for flow-control window

    def readable(self):
        """Handles what the socket has; False once the connection is over."""
        try:
            data = self.raw.recv(262144)
        except (BlockingIOError, InterruptedError):
            return True
        if not data:
            return False
        self.incoming.write(data)
        if self.h2 is None and not self.handshake():
            return False
        if self.h2 is None:
            return True
        chunks, alive = [], True
        while True:
            try:
                chunk = self.tls.read(1 << 20)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                alive = False
                break
            if not chunk:
                alive = False
                break
            chunks.append(chunk)
        if chunks and not self.speak(b"".join(chunks)):
            return False
        self.flush()
        return alive

    def handshake(self):
        """Advances the TLS handshake; False if it failed (after sending the alert)."""
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            self.flush()
            return True
        except ssl.SSLError:
            self.flush()  # the alert that says why
            return False
        self.flush()
        if self.tls.selected_alpn_protocol() != "h2":
            return False
        self.session = self.server.app.session(self.tls.getpeercert())
        self.server.count.opened()
        self.counted = True
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None))
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000,
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20})
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(16 << 20)
        self.send(self.h2.data_to_send())
        return True

    def preface(self, data):
        """Holds the client's first bytes until the connection preface and the frame
        header after it are in; returns them then, b"" while waiting, None if they are
        not the preface and a SETTINGS frame (RFC 9113 3.4; h2 would wait for a whole
        frame of any announced length, and lets other frames come first)."""
        self.opening += data
        got = bytes(self.opening[:len(PREFACE) + 9])
        if not PREFACE.startswith(got[:len(PREFACE)]):
            return None
        if len(got) < len(PREFACE) + 9:
            return b""
        length, kind = int.from_bytes(got[24:27], "big"), got[27]
        if kind != 4 or length % 6 or length > 16384 or int.from_bytes(got[29:33], "big") & 0x7FFFFFFF:
            return None
        data, self.opening = bytes(self.opening), None
        return data

    def speak(self, data):
        """Feeds HTTP/2 bytes in and answers every request they complete."""
        conn, streams, pending = self.h2, self.streams, self.pending
        if self.opening is not None:
            data = self.preface(data)
            if data is None:
                conn.close_connection(error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR)
                self.send(conn.data_to_send())
                return False
            if not data:
                return True
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.send(conn.data_to_send())  # the GOAWAY h2 queued
            return False
        kept = self.server.max_body_kept
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                headers = {}
                for name, value in event.headers:
                    headers.setdefault(name.decode("ascii", "replace"),
                                       value.decode("utf-8", "surrogateescape"))
                streams[event.stream_id] = [headers, bytearray(), 0]
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                stream = streams.get(event.stream_id)
                if stream is not None:
                    stream[1] += event.data[:kept - len(stream[1])]
                    stream[2] += len(event.data)
            elif isinstance(event, h2.events.StreamEnded):
                stream = streams.pop(event.stream_id, None)
                if stream is not None:
                    try:
                        self.respond(event.stream_id, *self.server.app.handle(*stream, self.session))
                    except h2.exceptions.StreamClosedError:
                        pending.pop(event.stream_id, None)  # reset meanwhile
            elif isinstance(event, h2.events.StreamReset):
                streams.pop(event.stream_id, None)
                pending.pop(event.stream_id, None)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id in list(pending):
                    self.send_body(stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.send(conn.data_to_send())
                return False
        out = conn.data_to_send()
        if out:
            self.send(out)
        return True

    def respond(self, stream_id, headers, body):
        self.h2.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.pending[stream_id] = body
            self.send_body(stream_id)

    def send_body(self, stream_id):
        """Sends a pending response body once the stream's window takes it whole."""
        body = self.pending[stream_id]
        try:
            if self.h2.local_flow_control_window(stream_id) >= len(body):
                self.h2.send_data(stream_id, body, end_stream=True)
                del self.pending[stream_id]
        except h2.exceptions.StreamClosedError:
            del self.pending[stream_id]

    def send(self, data):
        if data:
            self.tls.write(data)
        self.flush()

    def flush(self):
        """Moves what TLS produced to the socket; keeps what the socket cannot take now."""
        self.unsent += self.outgoing.read()
        while self.unsent:
            try:
                sent = self.raw.send(self.unsent)
            except (BlockingIOError, InterruptedError):
                return
            del self.unsent[:sent]

    def writable(self):
        try:
            self.flush()
        except OSError:
            return False
        return True

    def close(self):
        if self.counted:
            self.server.count.closed()
            self.counted = False
        self.raw.close()


class H2Server:
    """Listens on 127.0.0.1:port (at construction, so a ready file written afterwards
    means the port listens) and serves `app` from serve(), the event loop.

    name prefixes the simulator's complaints on stderr; count is the application's
    ConnectionCount (it reports and resets it); max_body_kept is how much of a
    request body reaches the application (enough to tell "too large"); strict_preface
    makes the client's first bytes the connection preface and a SETTINGS frame, else
    GOAWAY PROTOCOL_ERROR."""

    def __init__(self, app, port, context, name, count, max_body_kept, strict_preface=False):
        self.app, self.context, self.name, self.count = app, context, name, count
        self.max_body_kept, self.strict_preface = max_body_kept, strict_preface
        self.listener = socket.create_server(("127.0.0.1", port), backlog=1024)

    def serve(self):
        """The event loop: accepts connections and drives every one of them; closes the
        listener when it ends (SystemExit from a signal handler)."""
        try:
            self.loop()
        finally:
            self.listener.close()

    def loop(self):
        listener = self.listener
        selector = selectors.DefaultSelector()
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ, None)
        handshaking = set()

        def drop(connection):
            selector.unregister(connection.raw)
            handshaking.discard(connection)
            connection.close()

        while True:
            for key, mask in selector.select(timeout=1.0):
                if key.data is None:
                    while True:
                        try:
                            raw, _ = listener.accept()
                        except (BlockingIOError, InterruptedError):
                            break
                        raw.setblocking(False)
                        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        connection = Connection(self, raw)
                        selector.register(raw, selectors.EVENT_READ, connection)
                        handshaking.add(connection)
                    continue
                connection = key.data
                try:
                    alive = connection.writable() if mask & selectors.EVENT_WRITE else True
                    if alive and mask & selectors.EVENT_READ:
                        alive = connection.readable()
                except (OSError, h2.exceptions.H2Error):
                    alive = False  # a broken connection ends only this connection
                except Exception as e:  # a simulator bug: say so, but keep serving others
                    print(f"{self.name}: connection dropped: {e!r}", file=sys.stderr)
                    alive = False
                if not alive:
                    drop(connection)
                    continue
                if connection.h2 is not None:
                    handshaking.discard(connection)
                wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.unsent else 0)
                if wanted != key.events:
                    selector.modify(connection.raw, wanted, connection)
            now = time.monotonic()
            for connection in [c for c in handshaking if c.deadline < now]:
                drop(connection)  # a client that never finishes its handshake
