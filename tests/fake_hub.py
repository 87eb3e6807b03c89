"""A local stand-in for the Hugging Face Hub, enough for `huggingface_hub.snapshot_download`: the repository's
revision and file tree (`/api/models/<repo>/revision/<rev>`, `/api/models/<repo>/tree/<commit>`) and the files
(`HEAD`/`GET /<repo>/resolve/<commit>/<file>`, with Range for resumed downloads). Plain HTTP (no Xet), on
127.0.0.1; `chunk_delay_s` slows every 64 kB so a test can cancel mid-file. Nothing leaves the machine."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes]], chunk_delay_s: float = 0.0) -> None:
        self.repos = repos
        self.chunk_delay_s = chunk_delay_s
        self.requests: list[str] = []
        self.bytes_sent = 0
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's names
                hub._serve(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _json(self, handler: BaseHTTPRequestHandler, value: object, status: int = 200, error: str = "") -> None:
        data = json.dumps(value).encode()
        handler.send_response(status)
        if error:  # how the real hub names a 404 (huggingface_hub raises RepositoryNotFoundError for it)
            handler.send_header("X-Error-Code", error)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _serve(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(handler.path).path)
        self.requests.append(f"{handler.command} {path}")
        if m := re.fullmatch(r"/api/models/(.+?/.+?)/revision/([^/]+)", path):
            files = self.repos.get(m.group(1))
            if files is None:
                return self._json(handler, {"error": "Repository not found"}, 404, "RepoNotFound")
            return self._json(handler, {"id": m.group(1), "sha": COMMIT,
                                        "siblings": [{"rfilename": f} for f in files]})
        if m := re.fullmatch(r"/api/models/(.+?/.+?)/tree/([^/]+)(/.*)?", path):
            files = self.repos.get(m.group(1), {})
            return self._json(handler, [{"type": "file", "path": name, "size": len(data),
                                         "oid": hashlib.sha1(data).hexdigest()} for name, data in files.items()])
        if m := re.fullmatch(r"/(.+?/.+?)/resolve/([^/]+)/(.+)", path):
            data = self.repos.get(m.group(1), {}).get(m.group(3))
            if data is None:
                handler.send_response(404)
                handler.send_header("X-Error-Code", "EntryNotFound")
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                return None
            start = 0
            if r := re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range", "")):
                start = int(r.group(1))
            handler.send_response(206 if start else 200)
            handler.send_header("X-Repo-Commit", COMMIT)
            handler.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
            handler.send_header("Content-Length", str(len(data) - start))
            handler.end_headers()
            if body:
                for i in range(start, len(data), 65536):
                    if self.chunk_delay_s:
                        time.sleep(self.chunk_delay_s)
                    try:
                        handler.wfile.write(data[i:i + 65536])
                    except (BrokenPipeError, ConnectionResetError):
                        return None
                    self.bytes_sent += len(data[i:i + 65536])
            return None
        return self._json(handler, {"error": "not found"}, 404)
