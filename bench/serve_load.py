"""Load on `s2studio serve`: N concurrent clients on a demo model (tiny or mid).

    .venv/bin/python bench/serve_load.py [--clients 1,4,8] [--requests 16,32,48] [--frames 24] [--size mid]
                                         [--max-batch N] [--no-fast]

Starts `s2studio serve` as its own process on a free loopback port (a demo model and one voice in a temporary
folder), then for each N runs that many client threads, each posting OpenAI `/v1/audio/speech` requests (pcm,
streamed) until the round's request count is done. Prints per N: requests/s, p50/p95 time to the first audio
byte and to the last, and the server's resident memory (RSS, from /proc) after loading and after every round:
the server's batch (`/v1/health`) is printed first. On the fast path concurrent requests run as streams of one batch
(continuous batching, up to the server's largest batch): requests/s should grow with N while each step reads the
weights once for every stream; the exact path runs one request at a time (FIFO), for comparison. The last column
is requests/s over N = 1's. A script, not a test: figures vary by machine (and by what else it runs).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-key-0123456789"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder: Path, frames: int, fast: bool, queue: int, size: str,
                 max_batch: int | None) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "S2STUDIO_DATA_DIR": str(folder / "data"), "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, "-m", "s2studio"]
    subprocess.run([*cli, "demo-model", "--size", size, str(folder / "model")], env=env, check=True,
                   capture_output=True)
    clip = folder / "voice.wav"
    t = np.arange(44100) / 44100
    sf.write(str(clip), (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 44100)
    subprocess.run([*cli, "voice", "add", "--name", "Bench", "--clip", str(clip), "--text", "A bench voice."],
                   env=env, check=True, capture_output=True)
    port = free_port()
    args = [*cli, "serve", "--model", str(folder / "model"), "--port", str(port), "--api-key", KEY, "--device", "cpu",
            "--precision", "fp32", "--threads", "1", "--max-new-tokens", str(frames), "--queue", str(queue),
            "--fast" if fast else "--no-fast", *(["--max-batch", str(max_batch)] if max_batch else [])]
    server = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited: {server.stderr.read() if server.stderr else ''}")
        try:
            if httpx.get(url + "/v1/health", headers={"Authorization": f"Bearer {KEY}"}, timeout=1).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.kill()
    raise SystemExit("the server did not start within 300 s")


def one_request(client: httpx.Client, url: str, index: int) -> tuple[float, float, int]:
    body = {"model": "s2-pro", "input": f"Request number {index} for the load test.", "voice": "Bench",
            "response_format": "pcm", "stream_format": "audio", "seed": index}
    started = time.perf_counter()
    first = None
    size = 0
    with client.stream("POST", url + "/v1/audio/speech", json=body) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        for chunk in response.iter_raw():
            if first is None and chunk:
                first = time.perf_counter() - started
            size += len(chunk)
    return first or float("nan"), time.perf_counter() - started, size


def round_of(url: str, clients: int, requests: int) -> dict[str, float]:
    results: list[tuple[float, float, int]] = []
    errors: list[str] = []
    lock = threading.Lock()
    counter = iter(range(requests))

    def worker() -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as client:
            while True:
                with lock:
                    index = next(counter, None)
                if index is None:
                    return
                try:
                    result = one_request(client, url, index)
                except (RuntimeError, httpx.HTTPError) as exc:
                    with lock:
                        errors.append(str(exc))
                    continue
                with lock:
                    results.append(result)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ttfb = sorted(r[0] for r in results)
    total = sorted(r[1] for r in results)

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(round(p * (len(values) - 1))))] if values else float("nan")

    return {"ok": len(results), "errors": len(errors), "rps": len(results) / wall,
            "ttfb50": statistics.median(ttfb) if ttfb else float("nan"), "ttfb95": pct(ttfb, 0.95),
            "total50": statistics.median(total) if total else float("nan"), "total95": pct(total, 0.95),
            "audio_s": sum(r[2] for r in results) / 2 / 44100, "first_error": errors[0] if errors else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--requests", default="16,32,48", help="requests per round (default: 96 in all)")
    parser.add_argument("--frames", type=int, default=24, help="frames per request (the server's --max-new-tokens)")
    parser.add_argument("--fast", action=argparse.BooleanOptionalAction, default=True,
                        help="the fast path (batched; the default) or the exact one (one request at a time)")
    parser.add_argument("--size", default="mid", choices=("tiny", "mid"), help="the demo model's size")
    parser.add_argument("--max-batch", type=int, default=None, help="the server's --max-batch (default: its own)")
    args = parser.parse_args()
    clients = [int(n) for n in args.clients.split(",")]
    counts = [int(n) for n in args.requests.split(",")]
    if len(counts) != len(clients):
        raise SystemExit("--requests needs one count per --clients entry")
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        server, url = start_server(Path(tmp), args.frames, args.fast, max(clients) + 1, args.size, args.max_batch)
        try:
            health = httpx.get(url + "/v1/health", headers={"Authorization": f"Bearer {KEY}"}).json()
            print(f"s2studio serve, {args.size} demo model, {args.frames} frames per request, "
                  f"{'fast' if args.fast else 'exact'} path, largest batch {health.get('max_batch')}, "
                  f"{os.cpu_count()} CPUs")
            print(f"server RSS after loading: {rss_mb(server.pid):.0f} MB")
            print(f"{'N':>3} {'requests':>8} {'req/s':>6} {'TTFB p50':>9} {'TTFB p95':>9} {'total p50':>10} "
                  f"{'total p95':>10} {'audio s':>8} {'RSS MB':>7} {'x N=1':>6}")
            done, single = 0, None
            for n, count in zip(clients, counts):
                r = round_of(url, n, count)
                done += r["ok"]
                single = single or r["rps"]
                print(f"{n:>3} {r['ok']:>8} {r['rps']:>6.2f} {r['ttfb50']:>8.2f}s {r['ttfb95']:>8.2f}s "
                      f"{r['total50']:>9.2f}s {r['total95']:>9.2f}s {r['audio_s']:>8.1f} {rss_mb(server.pid):>7.0f}"
                      f" {r['rps'] / single:>6.2f}"
                      + (f"  ({r['errors']} errors: {r['first_error']})" if r["errors"] else ""))
            print(f"server RSS after {done} requests: {rss_mb(server.pid):.0f} MB")
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
