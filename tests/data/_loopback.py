"""A loopback HTTP server for the download tests: serves in-memory files, honours Range, can cut a reply short."""
import http.server
import threading
from contextlib import contextmanager


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves `server.files` (name -> bytes), honours `Range: bytes=N-`, logs every request, can cut a reply short."""

    def do_GET(self):  # noqa: N802 (the http.server spelling)
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        body = srv.files.get(self.path.lstrip("/"))
        if body is None:
            self.send_error(404, "no such file")
            return
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and srv.ranges:
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.end_headers()
                return
            status = 206
        rest = body[start:]
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        if srv.cut_after is not None:  # Send a prefix, then drop the connection (an interrupted transfer).
            self.wfile.write(rest[:srv.cut_after])
            self.wfile.flush()
            srv.cut_after = None
            self.close_connection = True
            return
        self.wfile.write(rest)

    def log_message(self, *args):
        pass


@contextmanager
def serve(files, ranges=True):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.requests, srv.ranges, srv.cut_after = files, [], ranges, None
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
