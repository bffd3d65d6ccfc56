"""A recording pass-through in front of the gateway: the agents under test are pointed at it, it
forwards every request unchanged (streams as they come) and records each one's method, path,
status and, for an error, the gateway's body — so a test can assert that every request a client
sent was answered, whatever the client does with a failure (retry, fall back, print nothing)."""

import gzip
import http.client
import http.server
import os
import sys
import threading
import urllib.parse

# Not forwarded either way: they describe one connection, not the message.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer",
              "content-length", "host"}


# wrangler dev's own answer when its dev proxy loses the connection to the Worker: not the
# Worker's (no `x-request-id`), so the request is sent again, as the Rust harness does
# (`tests/src/lib.rs`, `wrangler_restart`) — at most this many times in all.
DEV_PROXY_TRIES = 3


def dev_proxy_lost(reply, error_body):
    return (reply.status == 503 and reply.getheader("x-request-id") is None
            and b"Your worker restarted mid-request" in error_body)


def note(line):
    """A line for the harness's notes (`E2E_NOTES`, printed at the end of scripts/test)."""
    sys.stderr.write(f"note: {line}\n")
    path = os.environ.get("E2E_NOTES")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class Exchange:
    def __init__(self, method, path, headers, request, status, error_body):
        self.method, self.path, self.headers, self.request = method, path, headers, request
        self.status, self.error_body = status, error_body

    def __repr__(self):
        tail = f" {self.error_body[:600]!r}" if self.status >= 400 else ""
        return f"{self.method} {self.path} -> {self.status}{tail}"


class Recorder:
    """Forwards to `target` (http://host:port) from a free local port; `url` is its address."""

    def __init__(self, target):
        parsed = urllib.parse.urlsplit(target)
        self.target = (parsed.hostname, parsed.port)
        self.exchanges = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self):
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("content-length") or 0))

            def _forward(self):
                body = self._body()
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                if body or self.command in ("POST", "PUT", "PATCH"):
                    headers["content-length"] = str(len(body))
                for sent in range(1, DEV_PROXY_TRIES + 1):
                    upstream = http.client.HTTPConnection(*recorder.target, timeout=120)
                    try:
                        upstream.request(self.command, self.path, body=body, headers=headers)
                        reply = upstream.getresponse()
                    except OSError as e:
                        recorder._record(self, body, 599, str(e).encode())
                        self.send_error(502, f"recorder: gateway unreachable: {e}")
                        return
                    # Recorded before the client sees a byte: it may act on the answer (and a test
                    # read the record) before this thread is done. An error body is small: read whole.
                    error_body = reply.read() if reply.status >= 400 else b""
                    if sent == DEV_PROXY_TRIES or not dev_proxy_lost(reply, error_body):
                        break
                    upstream.close()
                    note("wrangler dev's proxy lost a request (503 \"Your worker restarted mid-request\"); sent again")
                shown = error_body
                if error_body and reply.getheader("content-encoding") == "gzip":
                    shown = gzip.decompress(error_body)
                recorder._record(self, body, reply.status, shown)
                self.send_response_only(reply.status, reply.reason)
                for k, v in reply.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                no_body = self.command == "HEAD" or reply.status in (204, 304)
                if not no_body:
                    self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    if error_body:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(error_body), error_body))
                    while not no_body:
                        chunk = b"" if error_body else reply.read1(65536)
                        if not chunk:
                            self.wfile.write(b"0\r\n\r\n")
                            break
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                finally:
                    upstream.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _record(self, handler, request, status, error_body):
        exchange = Exchange(handler.command, handler.path, dict(handler.headers.items()), request, status,
                            error_body.decode("utf-8", "replace"))
        with self._lock:
            self.exchanges.append(exchange)

    def failed(self):
        """The exchanges the gateway answered with an error status."""
        with self._lock:
            return [e for e in self.exchanges if e.status >= 400]

    def paths(self):
        with self._lock:
            return [(e.method, e.path.split("?")[0], e.status) for e in self.exchanges]

    def close(self):
        self._server.shutdown()
        self._server.server_close()
