"""The GCS emulator (gcp-storage-emulator) served by a threaded HTTP server.

The stock server answers one connection at a time with an accept backlog of 5
and HTTP/1.0: under 16-64 reads in flight, connections beyond the backlog are
refused and retried after a second, which measures the emulator, not us. Here
every connection gets a thread (deep backlog, keep-alive), and one lock around
request handling keeps the emulator's storage, which is not thread-safe,
consistent. Its metadata is not rewritten to its (in-memory) file after
every change (see serve).

    python tests/gcs_server.py --port 0 --bucket NAME   # prints "port N", then serves
"""
from __future__ import annotations

import argparse
import sys
import threading
from functools import partial
from http import server as http_server

from gcp_storage_emulator import server as emu
from gcp_storage_emulator.handlers import buckets
from gcp_storage_emulator.storage import Storage

_LOCK = threading.Lock()
TOKEN_PATH = "/tests/token"


class _Handler(emu.RequestHandler):
    protocol_version = "HTTP/1.1"  # the emulator's responses always carry Content-Length
    # Headers and body go out in two writes: with Nagle on, the second waits
    # for the client's delayed ACK (40 ms) on every keep-alive response.
    disable_nagle_algorithm = True

    def handle_one_request(self):
        # Read the request line and headers outside the lock (a keep-alive
        # connection waits there), handle under it.
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():
            return
        if self.command == "POST" and self.path == TOKEN_PATH:
            self._token()
            return
        method = getattr(self, "do_" + self.command, None)
        if method is None:
            self.send_error(501)
            return
        with _LOCK:
            method()
        self.wfile.flush()


    def _token(self) -> None:
        """An OAuth token endpoint for the tests' credentials (gcs_emulator.py
        writes them): every refresh gets a token the emulator never checks."""
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b'{"access_token": "test-token", "token_type": "Bearer", "expires_in": 3600}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()


class _Server(http_server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def serve(port: int, bucket: str) -> None:
    storage = Storage(use_memory_fs=True)
    # The emulator rewrites its whole metadata as JSON after every change, for
    # a restart to read back: in memory nothing outlives the process, and at
    # 50,000 objects that rewrite made each upload cost seconds (O(n^2) in all).
    storage._write_config_to_file = lambda: None
    buckets.create_bucket(bucket, storage)
    httpd = _Server(("127.0.0.1", port), partial(_Handler, storage))
    print(f"port {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--bucket", required=True)
    a = ap.parse_args()
    try:
        serve(a.port, a.bucket)
    except KeyboardInterrupt:
        sys.exit(0)
