"""A private PulseAudio server for the record tests: a "mic" null sink whose monitor is the default source (what
plays into "mic" is what a recording hears) and a "speaker" null sink as the default output. A process whose
environment is `PulseServer.env` sees them as ALSA's default device through the PulseAudio plugin, so the studio
records through PortAudio as it would from a real microphone. (The file-backed ALSA device of conftest.py records
garbage at other rates: fine for meters, not for speech.)

`scripts/setup` installs pulseaudio, pulseaudio-utils and libasound2-plugins; where PulseAudio cannot run the
tests that need it are skipped, naming why."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

INSTALL = "scripts/setup installs it: apt-get install pulseaudio pulseaudio-utils libasound2-plugins"


class PulseServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "native"
        self.env = {**os.environ, "PULSE_SERVER": f"unix:{self.socket}", "ALSA_CONFIG_PATH": str(folder / "asound.conf"),
                    "XDG_RUNTIME_DIR": str(folder), "PULSE_COOKIE": str(folder / "cookie")}

    def pactl(self, *args: str) -> str:
        return subprocess.run(["pactl", *args], env=self.env, check=True, capture_output=True, text=True,
                              timeout=20).stdout

    def play_into_mic(self, wav: Path) -> subprocess.Popen:
        """Play `wav` into the "mic" sink: the microphone hears it."""
        return subprocess.Popen(["paplay", "--device=mic", str(wav)], env=self.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)


@contextmanager
def pulse_server(folder: Path) -> Iterator[PulseServer]:
    """Start a server in `folder` (skipping the test, with the reason, where it cannot run); stopped afterwards."""
    missing = [exe for exe in ("pulseaudio", "pactl", "paplay") if shutil.which(exe) is None]
    plugin = any(Path("/usr/lib").glob("**/alsa-lib/libasound_module_pcm_pulse.so"))
    if missing or not plugin:
        pytest.skip(f"PulseAudio is not installed ({', '.join(missing) or 'the ALSA pulse plugin'} missing); {INSTALL}")
    folder.mkdir(parents=True, exist_ok=True)
    server = PulseServer(folder)
    (folder / "asound.conf").write_text("<confdir:alsa.conf>\npcm.!default { type pulse }\nctl.!default { type pulse }\n")
    log = open(folder / "pulseaudio.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        ["pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no", "--disallow-exit",
         "--disable-shm=yes", "--log-target=stderr", f"--load=module-native-protocol-unix socket={server.socket} "
         "auth-anonymous=1", "--load=module-null-sink sink_name=speaker", "--load=module-null-sink sink_name=mic"],
        env={**server.env, "HOME": str(folder)}, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while not server.socket.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.socket.exists():
            proc.kill()
            reason = (folder / "pulseaudio.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no socket"]
            pytest.skip(f"PulseAudio cannot run here ({reason[0]}); {INSTALL}")
        server.pactl("set-default-source", "mic.monitor")
        server.pactl("set-default-sink", "speaker")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
