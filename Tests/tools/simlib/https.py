"""HTTP/1.1 over TLS with a thread per connection, for the simulators of mail services
(EWS, Graph), and what their request handlers share: reading a body the strict way and
writing an answer that always carries Content-Length."""
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class TLSServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer whose connections speak TLS. The handshake runs in the
    connection's thread (with a 30 s socket timeout), so a slow or silent client holds
    up no one else; a connection that fails, in TLS or after, ends only itself."""
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, address, handler, tls):
        super().__init__(address, handler)
        self.tls = tls

    def finish_request(self, request, client_address):
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            request.settimeout(30)
            conn = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ValueError):
            return
        try:
            self.RequestHandlerClass(conn, client_address, self)
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        pass  # a broken connection ends only that connection


class RequestHandler(BaseHTTPRequestHandler):
    """Sends every method to dispatch(), which the simulator defines. Keep-alive; an
    idle connection closes after 120 s; http.server logs nothing (a simulator logs one
    line per request itself, without credentials)."""
    protocol_version = "HTTP/1.1"
    timeout = 120

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = do_PATCH = do_GET

    def log_message(self, *args):
        pass


class BodyError(Exception):
    """A request whose body cannot be read: answer `status` and close the connection."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def read_body(handler, max_body):
    """The request body of a BaseHTTPRequestHandler, by Content-Length only: chunked
    bodies (411), a Content-Length that is not a decimal number (400) or over max_body
    (413) raise BodyError and mark the connection to close; no Content-Length is b""."""
    length = handler.headers.get("Content-Length")
    if handler.headers.get("Transfer-Encoding"):
        handler.close_connection = True
        raise BodyError(411)
    if length is None:
        return b""
    if not length.isdigit():
        handler.close_connection = True
        raise BodyError(400)
    if int(length) > max_body:
        handler.close_connection = True
        raise BodyError(413)
    return handler.rfile.read(int(length))


def send_answer(handler, status, ctype, headers, out):
    """Writes the whole answer at once: status, Content-Type (if any), `headers`,
    Content-Length always, Connection: close when the connection ends, and the body
    unless the request was HEAD."""
    handler.send_response(status)
    if ctype:
        handler.send_header("Content-Type", ctype)
    for k, v in headers:
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(len(out)))
    if handler.close_connection:
        handler.send_header("Connection", "close")
    handler._headers_buffer.append(b"\r\n" + (out if handler.command != "HEAD" else b""))
    handler.flush_headers()
