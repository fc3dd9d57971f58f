"""An HTTP proxy in front of the GCS emulator that makes it behave like a
remote bucket: latency per request, faults, and the precondition and
generation rules real GCS enforces and the emulator does not.

    with GcsProxy(emulator_url, latency_ms=30, enforce_preconditions=True) as proxy:
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
        ...
        proxy.stats()["requests"]; proxy.set(blackhole=True)

It runs in its own process (a thread here would take the GIL from the code
under test) and is controlled over HTTP on its own port: `POST /__proxy/set`
with a JSON object of settings, `GET /__proxy/stats`.

`stats()["by_prefix"]` counts requests by the first segment of the object
name (or listed prefix) they concern; `media_by_prefix` the downloads, and
`pinned_media_by_prefix` those pinned to a generation.

Settings (all changeable at run time):
  latency_ms             held before every request is forwarded (a round trip)
  fail_503               fraction of requests answered 503 without forwarding
  reset_before           fraction of connections reset before forwarding
  reset_after            fraction of requests forwarded (applied upstream),
                         then the connection reset instead of the answer
  blackhole              accept and never answer
  enforce_preconditions  412 for an upload with ifGenerationMatch=0 when the
                         object exists (GCS does; the emulator ignores it)
  pin_generations        a read with `generation=G` of an object whose live
                         generation is not G answers 404 (GCS does; the
                         emulator serves the live object)
  fault_paths            only requests whose path contains one of these
                         strings get faults (empty: all requests)
"""
from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http import server as http_server

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "te", "trailer",
        "upgrade"}
DEFAULTS = {"latency_ms": 0.0, "fail_503": 0.0, "reset_before": 0.0, "reset_after": 0.0, "blackhole": False,
            "enforce_preconditions": True, "pin_generations": True, "fault_paths": []}


class GcsProxy:
    """Starts the proxy process; a context manager."""

    def __init__(self, upstream_url: str, seed: int = 0, **settings):
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown proxy settings {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        self._upstream = upstream_url
        self._seed = seed
        self._settings = dict(DEFAULTS, **settings)
        self._proc = None
        self.url = ""

    def __enter__(self) -> "GcsProxy":
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--upstream", self._upstream, "--seed", str(self._seed),
             "--settings", json.dumps(self._settings)], stdout=subprocess.PIPE)
        line = self._proc.stdout.readline().decode()
        if not line.startswith("port "):
            self._proc.kill()
            raise RuntimeError(f"the GCS proxy did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        return self

    def __exit__(self, *exc) -> None:
        self._proc.kill()
        self._proc.wait(timeout=10)

    def _control(self, path: str, body=None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST" if data else "GET")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=10) as r:
            return json.loads(r.read())

    def set(self, **settings) -> None:
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown proxy settings {sorted(unknown)}")
        self._control("/__proxy/set", settings)

    def stats(self) -> dict:
        """{"requests": n, "media": media GETs, "by_method": {...}, "faults": {...}, "connections": n}."""
        return self._control("/__proxy/stats")

    def reset_stats(self) -> None:
        self._control("/__proxy/reset_stats", {})

    @property
    def requests(self) -> int:
        return self.stats()["requests"]


# --- the proxy process -------------------------------------------------------

class _State:
    def __init__(self, upstream: str, settings: dict, seed: int):
        u = urllib.parse.urlsplit(upstream)
        self.host, self.port = u.hostname, u.port
        self.settings = settings
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.create_lock = threading.Lock()
        self.stop = threading.Event()
        self.reset_stats()

    def reset_stats(self) -> None:
        self.stats = {"requests": 0, "media": 0, "by_method": {}, "faults": {}, "connections": 0, "by_prefix": {},
                      "media_by_prefix": {}, "pinned_media_by_prefix": {}}

    def count(self, key: str, sub: str = "") -> None:
        with self.lock:
            if sub:
                d = self.stats[key]
                d[sub] = d.get(sub, 0) + 1
            else:
                self.stats[key] += 1

    def draw(self, p: float) -> bool:
        if p <= 0:
            return False
        with self.lock:
            return self.rng.random() < p


def _upstream(state: _State, method: str, path: str, headers: dict, body: bytes):
    conn = http.client.HTTPConnection(state.host, state.port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.reason, r.getheaders(), r.read()
    finally:
        conn.close()


_NO_LOCK = contextlib.nullcontext()
_OBJECT = re.compile(r"^(?:/download)?/storage/v1/b/([^/]+)/o/([^?]+)")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/([^/]+)/o")


def _live_generation(state: _State, bucket: str, quoted_name: str):
    status, _, _, body = _upstream(state, "GET", f"/storage/v1/b/{bucket}/o/{quoted_name}", {}, None)
    if status != 200:
        return None
    return str(json.loads(body).get("generation"))


def _top_prefix(path: str) -> str:
    """The first segment of the object name a request reads or writes, or of
    the prefix it lists ("(none)" for other requests): requests by dataset, e.g.
    an input folder's against an output's."""
    url = urllib.parse.urlsplit(path)
    m = _OBJECT.match(url.path)
    if m:
        name = urllib.parse.unquote(m.group(2))
    else:
        query = urllib.parse.parse_qs(url.query)
        name = (query.get("prefix") or query.get("name") or [""])[0]
    return name.split("/", 1)[0] or "(none)"


def _upload_name(query: dict, body: bytes):
    if "name" in query:
        return query["name"][0]
    m = re.search(rb'"name"\s*:\s*"((?:[^"\\]|\\.)*)"', body or b"")
    return json.loads(b'"' + m.group(1) + b'"') if m else None


class _Handler(http_server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle on, the second waits
    # for the client's delayed ACK (40 ms) on every keep-alive response.
    disable_nagle_algorithm = True
    state: _State = None

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        self.state.count("connections")

    def handle_one_request(self):
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline:
            self.close_connection = True
            return
        if not self.parse_request():
            return
        self._serve()
        self.wfile.flush()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reply(self, status: int, body: bytes, headers=(), reason: str = "") -> None:
        self.send_response(status, reason or None)
        for k, v in headers:
            if k.lower() not in _HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._reply(status, json.dumps(obj).encode(), [("Content-Type", "application/json")])

    def _reset(self) -> None:
        # SO_LINGER 0: close sends RST, as a dropped connection does.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _serve(self) -> None:
        st = self.state
        body = self._body()
        if self.path.startswith("/__proxy/"):
            return self._control(body)
        s = st.settings
        st.count("requests")
        st.count("by_method", self.command)
        st.count("by_prefix", _top_prefix(self.path))
        if self.command == "GET" and "alt=media" in self.path:
            st.count("media")
            st.count("media_by_prefix", _top_prefix(self.path))
            if "generation=" in self.path:  # a read pinned to a listed generation: a conversion's, not a report's
                st.count("pinned_media_by_prefix", _top_prefix(self.path))
        faulty = not s["fault_paths"] or any(p in urllib.parse.unquote(self.path) for p in s["fault_paths"])
        if faulty and s["blackhole"]:
            st.count("faults", "blackhole")
            st.stop.wait()
            return self._reset()
        if faulty and st.draw(s["reset_before"]):
            st.count("faults", "reset_before")
            return self._reset()
        if s["latency_ms"]:
            time.sleep(s["latency_ms"] / 1000.0)
        if faulty and st.draw(s["fail_503"]):
            st.count("faults", "503")
            return self._json(503, {"error": {"code": 503, "message": "injected: service unavailable"}})
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        # A create-only upload is checked and applied as one step, as GCS does
        # it: two racing uploads must not both pass the check.
        with st.create_lock if "ifGenerationMatch=0" in self.path else _NO_LOCK:
            if self._gcs_rules(body):
                return
            status, reason, resp_headers, resp_body = _upstream(st, self.command, self.path, headers, body)
        if faulty and st.draw(s["reset_after"]):
            st.count("faults", "reset_after")
            return self._reset()
        self._reply(status, resp_body, resp_headers, reason)

    def _gcs_rules(self, body: bytes) -> bool:
        """Answers as GCS would where the emulator does not; True if answered."""
        st, s = self.state, self.state.settings
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if s["enforce_preconditions"] and self.command == "POST" and query.get("ifGenerationMatch") == ["0"]:
            m = _UPLOAD.match(url.path)
            name = _upload_name(query, body) if m else None
            if name is not None and _live_generation(st, m.group(1), urllib.parse.quote(name, safe="")):
                st.count("faults", "412")
                self._json(412, {"error": {"code": 412, "message": "At least one of the pre-conditions you "
                                           "specified did not hold.", "errors": [{"reason": "conditionNotMet"}]}})
                return True
        if s["pin_generations"] and self.command == "GET" and "generation" in query:
            m = _OBJECT.match(url.path)
            if m and _live_generation(st, m.group(1), m.group(2)) != query["generation"][0]:
                st.count("faults", "generation_404")
                self._json(404, {"error": {"code": 404, "message": "No such object generation."}})
                return True
        return False

    def _control(self, body: bytes) -> None:
        st = self.state
        if self.path == "/__proxy/set":
            with st.lock:
                st.settings.update(json.loads(body))
            if not st.settings["blackhole"]:
                st.stop.set()
                st.stop = threading.Event()
            return self._json(200, st.settings)
        if self.path == "/__proxy/reset_stats":
            with st.lock:
                st.reset_stats()
            return self._json(200, {})
        with st.lock:
            return self._json(200, st.stats)


class _Server(http_server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", default="{}")
    a = ap.parse_args()
    _Handler.state = _State(a.upstream, dict(DEFAULTS, **json.loads(a.settings)), a.seed)
    httpd = _Server(("127.0.0.1", a.port), _Handler)
    print(f"port {httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
