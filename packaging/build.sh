#!/usr/bin/env bash
# Build the one-folder bundle dist/s2studio/ for this platform from packaging/s2studio.spec, then start it the way a
# person's machine would: with no compiler on PATH, make the tiny demo model, render a line on the fast path (the
# bundle's own CPU kernels, no build), and open the window for two seconds. Slow (minutes, a few GB): run by hand
# or by a release job, never in the test suite. packaging/README.md says what each platform gets.
#
#   packaging/build.sh                 CPU torch inside: the download for every machine
#   TORCH=cuda packaging/build.sh      the separate CUDA download: torch's CUDA build and NVIDIA's libraries inside
#   PYTHON=.venv/bin/python packaging/build.sh   bundle that environment as it is (its torch, its built kernels)
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${TORCH:-cpu}
if [ -z "${PYTHON:-}" ]; then
  # a build environment of its own: torch from the index of the wanted build, then the package itself, built
  # (its CPU kernels compiled) against that torch
  venv=build/bundle-venv-$TORCH
  case "$(uname -s)" in MINGW*|MSYS*|CYGWIN*) bin=Scripts; py=python ;; *) bin=bin; py=python3 ;; esac  # Git Bash
  [ -x "$venv/$bin/python" ] || "$py" -m venv "$venv"
  PYTHON=$venv/$bin/python
  pins=$("$PYTHON" -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(" ".join(p for p in d if p.startswith(("torch==", "torchaudio=="))))')
  case $TORCH in
    cpu) "$PYTHON" -m pip install -q --no-compile --index-url https://download.pytorch.org/whl/cpu $pins ;;
    cuda) "$PYTHON" -m pip install -q --no-compile $pins ;;  # PyPI's Linux and Windows builds are the CUDA ones
    *) echo "TORCH must be cpu or cuda" >&2; exit 2 ;;
  esac
  "$PYTHON" -m pip install -q --no-compile "setuptools>=64"
  "$PYTHON" -m pip install -q --no-compile --no-build-isolation '.[asr,serve,download]'
fi
"$PYTHON" -m pip install -q --no-compile "pyinstaller>=6.10"
"$PYTHON" -c 'from s2studio.engine.weights import kernels; p = kernels.kernel_path()
assert p.native, f"the CPU kernels of this environment do not load ({p.reason}): build them first"
print("bundling the CPU kernels:", ", ".join(kernels.module_name(w) for w in kernels.WIDTHS))'
# the icon as PNG for the .desktop file (rendered by Qt from the packaged SVG)
QT_QPA_PLATFORM=offscreen "$PYTHON" - <<'PYEOF'
from PySide6.QtWidgets import QApplication
from s2studio.ui.icons import app_icon
app = QApplication([])
app_icon().pixmap(256, 256).save("packaging/io.github.s2studio.S2Studio.png")
PYEOF
t0=$SECONDS
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build/pyinstaller \
  packaging/s2studio.spec
echo "PyInstaller: $((SECONDS - t0)) s"
if [ "$(uname)" = Linux ]; then
  cp resources/io.github.s2studio.S2Studio.desktop resources/io.github.s2studio.S2Studio.metainfo.xml \
     packaging/io.github.s2studio.S2Studio.png dist/s2studio/
fi
case "$(uname -s)" in
  Linux|Darwin) packaging/smoke.sh dist/s2studio ;;
  *) dist/s2studio/s2studio --help >/dev/null && echo "started (the smoke test with an empty PATH is for Linux and macOS)" ;;
esac
echo "built dist/s2studio ($(du -sh dist/s2studio | cut -f1))"
