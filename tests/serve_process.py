"""A real `s2studio serve` process on 127.0.0.1, for the tests that must see the command itself: its start-up
checks, its connections and timeouts, its log and its memory. Its data dir and temporary folder are the test's.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from s2studio.serve.server import free_port

ROOT = Path(__file__).resolve().parents[1]


def wav_bytes(seconds: float, rate: int = 22050, channels: int = 1, fmt: str = "WAV", hz: float = 220.0,
              subtype: str | None = None) -> bytes:
    """A tone (or silence, hz=0) as the bytes of an audio file."""
    t = np.arange(int(seconds * rate)) / rate
    mono = (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32) if hz else np.zeros(len(t), np.float32)
    buf = io.BytesIO()
    sf.write(buf, np.repeat(mono[:, None], channels, axis=1), rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def flac_of_unknown_length(seconds: float, rate: int = 48000, channels: int = 2) -> bytes:
    """Silence as FLAC whose header does not say how long it is (total samples 0 in STREAMINFO)."""
    data = bytearray(wav_bytes(seconds, rate, channels, "FLAC", hz=0))
    at = 8 + 10  # STREAMINFO starts after "fLaC" and its 4-byte block header; 64 bits hold rate .. total samples
    bits = int.from_bytes(data[at:at + 8], "big") & ~((1 << 36) - 1)
    data[at:at + 8] = bits.to_bytes(8, "big")
    return bytes(data)


class ServeProcess:
    """`python -m s2studio serve --model MODEL ARGS` on a free port of 127.0.0.1, its stderr collected."""

    def __init__(self, model: Path, data_dir: Path, tmp_dir: Path, *args: str, api_key: str | None = None,
                 env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.lines: list[str] = []
        tmp_dir.mkdir(parents=True, exist_ok=True)
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path]),
                   "S2STUDIO_DATA_DIR": str(data_dir), "TMPDIR": str(tmp_dir), "OMP_NUM_THREADS": "1",
                   "PYTHONUNBUFFERED": "1", **(env or {})}
        environ.pop(ENV_KEY, None)
        if api_key is not None:
            environ[ENV_KEY] = api_key
        self.command = [sys.executable, "-m", "s2studio", "serve", "--model", str(model), "--port", str(self.port),
                        "--device", "cpu", "--threads", "1", *args]
        self.proc = subprocess.Popen(self.command, env=environ, cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="backslashreplace")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self, timeout: float = 300) -> ServeProcess:
        deadline = time.monotonic() + timeout
        while not any(line.startswith("serving ") for line in self.lines):  # printed as it starts to serve
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve did not start:\n{self.log}")
            time.sleep(0.05)
        return self

    def wait_for_log(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in self.lines if text in line), None)
            if found is not None:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never appeared in the log:\n{self.log}")

    def status(self, field: str) -> int:
        """A `/proc/PID/status` figure in kB (VmRSS, VmHWM, VmSize)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def cpu_seconds(self) -> float:
        """CPU time the server has used, all its threads, user and system (`/proc/PID/stat`): unlike the wall
        time of its answers, it does not grow when other processes load the machine."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        return self.proc.returncode

    def __enter__(self) -> ServeProcess:
        return self.wait_ready()

    def __exit__(self, *exc: object) -> None:
        self.stop()


ENV_KEY = "S2STUDIO_API_KEY"
