"""Exporting a book: bounded memory whatever the length, a WAV past 4 GB as RF64, free space checked first, a full
disk or a stop leaving nothing, and the script's headings as chapter markers read back from every format."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import mutagen
import numpy as np
import pytest
import soundfile as sf

from s2studio.audio.chapters import chapter_titles
from s2studio.audio.export import ExportSettings, Metadata, RenderedLine, export, output_paths
from s2studio.engine.api import SAMPLE_RATE
from s2studio.errors import Cancelled, UserError
from s2studio.state.script import parse_script

SR = SAMPLE_RATE


def tone(seconds: float, freq: float, amp: float = 0.25) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    """A long silent take that costs no memory (one value, broadcast): the export's own allocations are measured."""
    return np.broadcast_to(np.float32(0.0), (round(seconds * SR),))


def riff_markers(path: Path) -> tuple[bytes, int, list[tuple[int, str]]]:
    """(RIFF or RF64, the RIFF size the file declares, [(cue position, label)]), read chunk by chunk."""
    size = path.stat().st_size
    with path.open("rb") as f:
        kind, declared, _ = struct.unpack("<4sI4s", f.read(12))
        data_size = None
        if kind == b"RF64":
            assert f.read(4) == b"ds64"
            f.read(4)
            declared, data_size = struct.unpack("<QQ", f.read(16))
        positions, labels, pos = {}, {}, 12
        while pos + 8 <= size:
            f.seek(pos)
            cid, n = struct.unpack("<4sI", f.read(8))
            if cid == b"data" and n == 0xFFFFFFFF:
                n = data_size
            if cid == b"cue ":
                count = struct.unpack("<I", f.read(4))[0]
                for _ in range(count):
                    ident, at = struct.unpack("<II16x", f.read(24))
                    positions[ident] = at
            elif cid == b"LIST" and f.read(4) == b"adtl":
                body = f.read(n - 4)
                k = 0
                while k < len(body):
                    sub, m = struct.unpack_from("<4sI", body, k)
                    if sub == b"labl":
                        ident = struct.unpack_from("<I", body, k + 8)[0]
                        labels[ident] = body[k + 12:k + 8 + m].split(b"\0")[0].decode()
                    k += 8 + m + (m & 1)
            pos += 8 + n + (n & 1)
    return kind, declared, [(positions[i], labels.get(i, "")) for i in sorted(positions)]


def libsndfile_cues(path: Path) -> list[tuple[int, str]]:
    """The cue points libsndfile reads from a WAV (positions and their `labl` names): a reader that is not ours."""
    from soundfile import _ffi, _snd

    with sf.SoundFile(str(path)) as f:
        count = _ffi.new("uint32_t*")
        _snd.sf_command(f._file, 0x10CD, count, 4)  # SFC_GET_CUE_COUNT
        size = 4 + 280 * count[0]
        buf = _ffi.new("char[]", size)
        _snd.sf_command(f._file, 0x10CE, buf, size)  # SFC_GET_CUE
        raw = bytes(_ffi.buffer(buf, size))
    out = []
    for i in range(count[0]):
        _, at = struct.unpack_from("<iI", raw, 4 + 280 * i)
        out.append((at, raw[4 + 280 * i + 24:4 + 280 * (i + 1)].split(b"\0")[0].decode()))
    return out


BOOK = [RenderedLine("a", "Ann", "Once.", tone(0.5, 220), chapter="One"),
        RenderedLine("b", "Ben", "Twice.", tone(0.3, 330)),
        RenderedLine("c", "Ann", "Thrice.", tone(0.4, 440), chapter="Two — The road"),
        RenderedLine("d", "Ben", "Done.", tone(0.2, 550), chapter="Three")]
GAP = round(0.2 * SR)
STARTS = [0, round(0.5 * SR) + GAP, round(0.8 * SR) + 2 * GAP, round(1.2 * SR) + 3 * GAP]


def test_headings_become_the_chapters_of_the_lines_after_them() -> None:
    script = parse_script("Narrator: Before.\n# Part one\n## Chapter 1\nAnn: One.\nBen: Two.\n# Empty\n# Two\nAnn: Three.")
    ids = [ln.line_id for ln in script.lines]
    assert chapter_titles(script, ids) == {ids[1]: "Part one — Chapter 1", ids[3]: "Empty — Two"}
    # the chapter's first line is not exported: its first exported line opens it
    assert chapter_titles(script, ids[2:]) == {ids[2]: "Part one — Chapter 1", ids[3]: "Empty — Two"}


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac", "ogg", "opus"])
def test_chapter_markers_cue_sheet_and_chapter_files_read_back(tmp_path: Path, fmt: str) -> None:
    lines = [RenderedLine("o", "Ann", "Before any heading.", tone(0.3, 200)), *BOOK]
    settings = ExportSettings(format=fmt, gap_s=0.2, metadata=Metadata(title="Book", voices=("V",)))
    out = tmp_path / f"book.{fmt}"
    result = export(lines, settings, out=out, cue=tmp_path / "book.cue", chapters_dir=tmp_path / "parts")
    shift = round(0.3 * SR) + GAP
    starts = [0] + [s + shift for s in STARTS]
    titles = ["Book", "One", "Two — The road", "Three"]  # the opening takes the title; it is no chapter marker
    assert [(p.title, p.start) for p in result.parts] == list(zip(titles, [0, starts[1], starts[3], starts[4]]))
    marks = list(zip([starts[1], starts[3], starts[4]], titles[1:]))
    if fmt == "wav":
        assert libsndfile_cues(out) == marks
        assert riff_markers(out) == (b"RIFF", out.stat().st_size - 8, marks)
    elif fmt == "mp3":
        tags = mutagen.File(out).tags
        chapters = sorted(tags.getall("CHAP"), key=lambda c: c.start_time)
        assert [(c.start_time, c.end_time, str(c.sub_frames["TIT2"])) for c in chapters] == [
            (round(a * 1000 / SR), round(b * 1000 / SR), t) for (a, t), b in zip(marks, [starts[3], starts[4],
                                                                                        result.samples])]
        assert tags.getall("CTOC")[0].child_element_ids == [c.element_id for c in chapters]
        assert str(tags["TIT2"]) == "Book"  # libsndfile's own tags are kept
    else:
        tags = mutagen.File(out).tags
        for i, (at, title) in enumerate(marks, start=1):
            ms = round(at * 1000 / SR)
            assert tags[f"CHAPTER{i:03d}"] == [f"00:00:{ms // 1000:02d}.{ms % 1000:03d}"]
            assert tags[f"CHAPTER{i:03d}NAME"] == [title]
    data, rate = sf.read(str(out), dtype="float32")  # the markers cost the audio nothing
    assert len(data) == round(result.samples * rate / SR)
    cue = (tmp_path / "book.cue").read_text()
    kind = "MP3" if fmt == "mp3" else "WAVE"
    assert cue.startswith(f'REM COMMENT "S2 Studio"\nTITLE "Book"\nPERFORMER "V"\nFILE "book.{fmt}" {kind}\n'
                          '  TRACK 01 AUDIO\n    TITLE "Book"\n    INDEX 01 00:00:00\n  TRACK 02 AUDIO\n')
    assert cue.count("TRACK") == 4 and '    TITLE "Two — The road"\n    INDEX 01 00:01:' in cue
    names = ["01_Book", "02_One", "03_Two-The-road", "04_Three"]
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == [f"{n}.{fmt}" for n in names]
    if fmt in ("wav", "flac"):  # each chapter file is the mix from its first line to the end of its last
        ends = [starts[1] - GAP, starts[3] - GAP, starts[4] - GAP, result.samples]
        for name, a, b in zip(names, [0, starts[1], starts[3], starts[4]], ends):
            part, _ = sf.read(str(tmp_path / "parts" / f"{name}.{fmt}"), dtype="float32")
            np.testing.assert_allclose(part, data[a:b], atol=1e-4)
    assert output_paths(lines, fmt, out=out, chapters_dir=tmp_path / "parts", cue=tmp_path / "book.cue",
                        opening="Book") == list(result.files)


def test_a_book_without_headings_has_one_part_and_no_markers(tmp_path: Path) -> None:
    lines = [RenderedLine(ln.line_id, ln.speaker, ln.text, ln.audio) for ln in BOOK]
    result = export(lines, ExportSettings(gap_s=0.2), out=tmp_path / "b.wav", cue=tmp_path / "b.cue")
    assert [(p.title, p.start, p.heading) for p in result.parts] == [("Opening", 0, False)]
    assert libsndfile_cues(tmp_path / "b.wav") == []
    assert (tmp_path / "b.cue").read_text().count("TRACK") == 1


def test_free_space_is_checked_before_anything_is_written(tmp_path: Path, monkeypatch) -> None:
    free = 10_000_000
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(10**12, 10**12 - free, free))
    lines = [RenderedLine("a", "Ann", "x", tone(60.0, 220)), RenderedLine("b", "Ben", "y", tone(60.0, 330))]
    with pytest.raises(UserError) as exc:
        export(lines, ExportSettings(format="wav", gap_s=0.0), out=tmp_path / "out" / "m.wav",
               stems_dir=tmp_path / "out" / "stems")
    # the mix (10.6 MB) and two full-length stems, plus 2 % left free, on one disk
    assert str(exc.value) == (f"Not enough free space: this export needs about 32.4 MB on the disk of {tmp_path}, and "
                              "10.0 MB is free there; free some space or choose another folder, or write the stems as "
                              "FLAC. Nothing was written.")
    assert sorted(tmp_path.iterdir()) == []
    export(lines, ExportSettings(format="mp3", gap_s=0.0), out=tmp_path / "m.mp3")  # 2.9 MB fit


def test_stopping_leaves_nothing(tmp_path: Path) -> None:
    stop = threading.Event()
    seen: list[tuple[float, str]] = []

    def progress(fraction: float, what: str) -> None:
        seen.append((fraction, what))
        if what == "Writing the audio…" and fraction > 0.5:
            stop.set()

    target = tmp_path / "m.wav"
    target.write_bytes(b"the last export")
    lines = [RenderedLine(f"l{i}", "Ann", "x", silence(10.0)) for i in range(10)]
    with pytest.raises(Cancelled):
        export(lines, ExportSettings(normalize="peak"), out=target, stems_dir=tmp_path / "stems", progress=progress,
               cancel=stop)
    assert seen[0][1] == "Measuring the loudness…" and seen[-1][1] == "Writing the audio…"
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.wav"] and target.read_bytes() == b"the last export"


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
import numpy as np
from s2studio.audio.export import ExportSettings, RenderedLine, export
from s2studio.errors import UserError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (2_000_000, 2_000_000))
lines = [RenderedLine("a", "Ann", "x", np.full(30 * 44100, 0.1, np.float32))]
try:
    export(lines, ExportSettings(), out=Path(sys.argv[1]) / "m.wav", srt=Path(sys.argv[1]) / "m.srt")
except UserError as exc:
    print(exc)
"""


def test_a_disk_that_fills_up_leaves_the_old_files_and_one_line(tmp_path: Path) -> None:
    (tmp_path / "m.wav").write_bytes(b"the last export")
    (tmp_path / "m.srt").write_text("old subtitles")
    run = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"cannot write {tmp_path / 'm.wav'}: the file is too large for that disk\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.srt", "m.wav"]  # no temp file left behind
    assert (tmp_path / "m.wav").read_bytes() == b"the last export" and (tmp_path / "m.srt").read_text() == "old subtitles"


BOUNDED = """
import json, resource, sys, tracemalloc
from pathlib import Path
import numpy as np
from s2studio.audio.export import ExportSettings, RenderedLine, export

SR, MINUTES, BUDGET = 44100, 40, 300 * 2**20
out = Path(sys.argv[1])
def line(i, samples):
    level = np.float32(0.05 * (1 + i % 3))  # each take one level, broadcast: the takes cost no memory
    return RenderedLine(f"l{i}", f"S{i % 3}", f"Line {i}.", np.broadcast_to(level, (samples,)),
                        chapter=f"Chapter {i // 60 + 1}" if i % 60 == 0 else None)
lines = [line(i, 6 * SR - 17640) for i in range(MINUTES * 10)]  # 6 s a line with the gap
settings = ExportSettings(format="wav", normalize="peak", stems_format="flac")
export(lines[:3], settings, out=out / "warm.wav", stems_dir=out / "warm", cue=out / "warm.cue",
       chapters_dir=out / "warm-parts")  # every library loaded before the limit
vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + BUDGET, resource.RLIM_INFINITY))
tracemalloc.start()
result = export(lines, settings, out=out / "book.wav", stems_dir=out / "stems", cue=out / "book.cue",
                chapters_dir=out / "parts")
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "samples": result.samples, "gain": result.gain_db,
                  "mix_bytes": result.samples * 4}))
"""


def test_a_book_longer_than_the_memory_budget_exports_in_bounded_memory(tmp_path: Path) -> None:
    """40 minutes: its mix as one float32 array (423 MB) would not fit in the 300 MB of address space the export
    is given above what the process holds, and it would before (the mix, a gained copy, a clipped copy, a stem)."""
    # address space, not memory, is what the limit counts: glibc reserves 64 MB of it for each thread's malloc arena
    # (the stems are encoded on several threads), so the arenas are capped to keep the budget about allocations
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    run = subprocess.run([sys.executable, "-c", BOUNDED, str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["mix_bytes"] > 300 * 2**20  # longer than the budget
    assert got["peak"] < 40 * 2**20, got  # numpy and Python allocations at their peak: a few blocks
    samples = got["samples"]
    gain = 10 ** (got["gain"] / 20)
    assert abs(got["gain"] - 20 * np.log10(1 / 0.15 * 10 ** (-1 / 20))) < 1e-6  # to -1 dBFS from the loudest take
    assert sf.info(str(tmp_path / "book.wav")).frames == samples
    line = 6 * SR
    with sf.SoundFile(str(tmp_path / "book.wav")) as mix:
        for i in (0, 1, 2, 399):  # each take at its level, the gap silent
            mix.seek(i * line)
            got_line = mix.read(line - 17640 + 10, dtype="float32")
            np.testing.assert_allclose(got_line[:-10], 0.05 * (1 + i % 3) * gain, atol=1 / 32768)
            if i < 399:
                assert not got_line[-10:].any()
    stems = sorted((tmp_path / "stems").iterdir())
    assert [p.name for p in stems] == ["01_S0.flac", "02_S1.flac", "03_S2.flac"]
    with sf.SoundFile(str(stems[1])) as s1:
        assert s1.frames == samples
        s1.seek(line)
        np.testing.assert_allclose(s1.read(line - 17640, dtype="float32"), 0.1 * gain, atol=1e-6)
        assert not s1.read(line, dtype="float32").any()  # S2's line is silent in S1's stem
    assert len(libsndfile_cues(tmp_path / "book.wav")) == 7 and len(list((tmp_path / "parts").iterdir())) == 7


def test_a_wav_past_4_gb_is_written_as_rf64_and_reads_back(tmp_path: Path) -> None:
    hours, tail = 13.6, tone(1.0, 440)
    size = round(hours * 3600 * SR) * 2
    need = size + 200 * 2**20
    free = shutil.disk_usage(tmp_path).free
    if free < need:
        pytest.skip(f"needs {need / 1e9:.1f} GB free in {tmp_path}, {free / 1e9:.1f} GB is free")
    lines = [RenderedLine(f"h{i}", "Ann", f"Hour {i}.", silence(3600.0), chapter=f"Hour {i + 1}") for i in range(13)]
    lines.append(RenderedLine("t", "Ann", "The end.", tail, chapter="The end"))
    lines.insert(13, RenderedLine("m", "Ann", "Minutes.", silence(0.6 * 3600 - 1.0 - 14 * 0.4 + 0.4)))
    out = tmp_path / "book.wav"
    result = export(lines, ExportSettings(format="wav", gap_s=0.4), out=out)
    assert result.samples * 2 > 2**32  # past what WAV's 32-bit sizes can say
    info = sf.info(str(out))
    assert (info.format, info.frames) == ("RF64", result.samples)
    with sf.SoundFile(str(out)) as f:  # the end of the file, past 4 GB, is the last line's audio
        f.seek(result.samples - len(tail))
        np.testing.assert_allclose(f.read(dtype="float32"), tail, atol=1 / 32768)
    kind, declared, marks = riff_markers(out)
    assert (kind, declared) == (b"RF64", out.stat().st_size - 8)
    gap = round(0.4 * SR)
    starts = [i * (3600 * SR + gap) for i in range(13)] + [result.samples - len(tail)]
    assert marks == list(zip(starts, [f"Hour {i + 1}" for i in range(13)] + ["The end"]))
    assert os.path.getsize(out) > 2**32


MANY_CLIPS = """
import resource, sys
from pathlib import Path
import numpy as np
from s2studio.audio.export import ExportSettings, RenderedLine, export
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
lines = [RenderedLine(f"l{i}", "Ann", f"Line {i}.", np.full(100, 0.1, np.float32)) for i in range(300)]
print(len(export(lines, ExportSettings(format="flac"), clips_dir=Path(sys.argv[1])).files))
"""


def test_more_clips_than_the_open_files_limit(tmp_path: Path) -> None:
    """Every staged file stays open (locked) until the commit: a book's clips outnumber a default limit of 1024."""
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 400:
        pytest.skip("the hard limit of open files here is below what the test needs")
    run = subprocess.run([sys.executable, "-c", MANY_CLIPS, str(tmp_path / "clips")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and run.stdout == "300\n", run.stderr[-2000:]
    assert len(list((tmp_path / "clips").iterdir())) == 300
