#!/usr/bin/env bash
# Build the one-folder bundle (dist/s2studio/) and start it once headless on the fake engine.
# Run by hand or from a bench, not in CI: PyInstaller needs a minute and ~2 GB with torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m pip install --quiet "pyinstaller>=6.10"
# the icon as PNG for the .desktop file (rendered by Qt from the packaged SVG)
QT_QPA_PLATFORM=offscreen "$PY" - <<'PYEOF'
from PySide6.QtWidgets import QApplication
from s2studio.ui.icons import app_icon
app = QApplication([])
app_icon().pixmap(256, 256).save("packaging/io.github.s2studio.S2Studio.png")
PYEOF
# the CPU kernels prebuilt for AVX512 and AVX2 CPUs, so that the bundle needs no compiler, with their hashes in
# build/kernels/SHA256SUMS: the bundle loads only a listed build (engine/weights/cpu_gemv.py)
rm -rf build/kernels
"$PY" -m s2studio.engine.weights.cpu_gemv build/kernels
"$PY" -m PyInstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/s2studio.spec
cp resources/io.github.s2studio.S2Studio.desktop resources/io.github.s2studio.S2Studio.metainfo.xml \
   packaging/io.github.s2studio.S2Studio.png dist/s2studio/
# smoke test: the command line, then the window for two seconds (offscreen, fake engine, throwaway data)
tmp=$(mktemp -d)
dist/s2studio/s2studio --help >/dev/null
S2STUDIO_DATA_DIR="$tmp" XDG_CONFIG_HOME="$tmp/config" QT_QPA_PLATFORM=offscreen S2STUDIO_ENGINE=fake \
  S2STUDIO_QUIT_AFTER_MS=2000 dist/s2studio/s2studio
rm -rf "$tmp"
echo "built dist/s2studio ($(du -sh dist/s2studio | cut -f1)); it started and quit cleanly"
