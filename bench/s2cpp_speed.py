"""Decode frames/s of our fast path beside the C++ port s2.cpp (ggml), same model folders, one run, interleaved.

    python bench/s2cpp_speed.py --s2cpp BUILD_DIR --python SIDE_VENV/bin/python [--sizes tiny mid] [--threads 1 2]

A benchmark, not a test: it prints figures and asserts nothing; CI never runs it. s2.cpp is not part of the
project and nothing of it is kept in the repository: build it outside (CMake, CPU only, `-DGGML_NATIVE=ON`, target
`s2`), and give its converter's Python packages (torch, numpy, gguf, safetensors) a venv of their own, never the
project's. `BUILD_DIR` is that CMake build folder: its `s2` runs the port, its `ggml/src/libggml-base.so`
quantizes, and its `CMakeCache.txt` names the source folder, whose `quantize/unified_export_gguf.py` converts.

What one run does, per model size (the project's seeded random-weight folders, `write_demo_model`; the full-size
random codec is written once and shared, because s2.cpp's converter and loader hard-code S2's codec shape):

1. converts the folder with s2.cpp's own converter to f16 GGUF (its default; it writes f16 or f32 only), then
   quantizes the language model's 2-D tensors with ggml's own quantizer (`ggml_quantize_chunk` from the build's
   libggml-base, what ggml's and llama.cpp's quantize tools call; the port's README sends users to such a tool)
   to q8_0 and q4_K (q4_K needs rows that are a multiple of 256: narrower tensors, all of the tiny model's, fall
   back to q4_1, counted in the row's label). The codec's tensors stay f16, as in the port's published files.
   All kept in `--work` for reruns;
2. for each pair of matching precisions: ours loaded as the engine's CPU fast path loads it (float32 math,
   linear layers narrowed: "bf16" weights, int8 per-row, int4 groups of 128 with a scale and an offset) and s2.cpp
   on the GGUF nearest in bytes and kind:
   - bf16 <-> f16: both 2 bytes a weight, widened to float32 for the math; the port's converter writes f16;
   - int8 <-> q8_0: 8-bit symmetric codes with a scale (ours per row, q8_0 per block of 32, 8.5 bits a weight);
     ggml also rounds the activations to 8 bits, we keep them float32;
   - int4 <-> q4_K: 4-bit asymmetric codes in groups (ours a bf16 scale and offset per 128: 4.25 bits; q4_K
     6-bit scales and minimums per 32 in blocks of 256: 4.5 bits). q4_K_M, the port's published 4-bit file, is
     q4_K with a few tensors in q6_K, more bytes; plain q4_K is the nearer match to our int4 everywhere;
3. for each thread count: one warm-up each, then `--runs` runs alternating ours and s2.cpp, each making exactly
   `--frames` frames from the same prompt (a 10 s reference of random codes + a sentence, `--reference-frames`;
   the port reads the reference's codes from a voice profile written here, so it encodes no audio): ours with
   `<|im_end|>` left out of the head as in `bench/frame_speed.py`, the port with `--min-tokens-before-end` =
   `--max-tokens` = frames.
   Both with OMP_WAIT_POLICY=PASSIVE and OMP_NUM_THREADS = threads (the port's ggml uses OpenMP, and torch too).

Figures: decode frames/s, median over runs (ours: frames after the first / time after the first; the port's
own `[Metrics] Generate` line: frames / its decode loop's time) and first frame in ms (ours: measured; the port
prints only its prefill, so its first frame is shown as prefill + one mean frame). The port is stopped once it
has printed its generation metrics, before its codec decodes the audio (which neither figure includes). The
ratio is ours / s2.cpp; the 1-minute load average is printed beside each row. S2 speaks 21.53 frames/s of audio.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PAIRS = (("bf16", "f16"), ("int8", "q8_0"), ("int4", "q4_k"))
"""(ours, s2.cpp's) matching precisions; see the module docstring for why each is the nearest."""
GGML_TYPES = {"q8_0": 8, "q4_k": 12, "q4_1": 3}
"""ggml_type numbers (ggml.h) of the quantized types made here; f16 is the converter's own output."""
FALLBACK = {"q8_0": (), "q4_k": ("q4_1",)}
"""Where a tensor's rows do not divide into a type's blocks (q4_K: 256), the next type tried: q4_1 is 4-bit with
a scale and a minimum per 32 (asymmetric, like ours); a tensor nothing fits stays f16."""


def load() -> str:
    return "load %.2f" % os.getloadavg()[0]


# ----------------------------------------------------------------------------- the port's files


@dataclass(frozen=True)
class Port:
    """A built s2.cpp: where its binary, its ggml library and its converter are."""

    binary: Path
    ggml_base: Path
    converter: Path
    python: Path


def find_port(build: Path | None, python: Path | None) -> Port | str:
    """The port in `build`, or a one-line reason why it cannot be used."""
    if build is None:
        return ("give --s2cpp BUILD_DIR: a CMake build folder of github.com/rodrigomatta/s2.cpp "
                "(see this file's docstring)")
    binary, ggml_base, cache = build / "s2", build / "ggml" / "src" / "libggml-base.so", build / "CMakeCache.txt"
    for need in (binary, ggml_base, cache):
        if not need.exists():
            return (f"{need} is missing: build s2.cpp there first "
                    f"(cmake -B {build} -DGGML_NATIVE=ON; cmake --build {build} --target s2)")
    source = re.search(r"^s2cpp_SOURCE_DIR:STATIC=(.*)$", cache.read_text(errors="replace"), re.M)
    converter = Path(source.group(1)) / "quantize" / "unified_export_gguf.py" if source else None
    if converter is None or not converter.is_file():
        return (f"s2.cpp's converter (quantize/unified_export_gguf.py) is not in the source folder that "
                f"{cache} names")
    if python is None:
        return ("give --python: a venv's python with the converter's packages (torch, numpy, gguf, safetensors), "
                "not the project's")
    probe = subprocess.run([str(python), "-c", "import torch, numpy, gguf, safetensors"], capture_output=True,
                           text=True)
    if probe.returncode:
        return f"{python} cannot import the converter's packages: {probe.stderr.strip().splitlines()[-1:]}"
    return Port(binary, ggml_base, converter, python)


def gguf_of(port: Port, work: Path, size: str, folder: Path, codec: Path, kind: str) -> tuple[Path, str]:
    """The model folder as s2.cpp's GGUF of `kind` (made once, kept in `work`), and a note on fallbacks."""
    f16 = work / f"{size}-f16.gguf"
    out = work / f"{size}-{kind}.gguf"
    note = out.with_suffix(".note")
    if not f16.exists() and not (kind != "f16" and out.exists()):  # a kept quantized file needs no f16
        run_checked([str(port.python), str(port.converter), "--checkpoint-path", str(folder),
                     "--codec-checkpoint-path", str(codec), "--output", str(f16) + ".part", "--out-dtype", "f16"])
        os.replace(str(f16) + ".part", f16)
    if kind == "f16":
        return f16, ""
    if not out.exists():
        run_checked([str(port.python), __file__, "--quantize", str(f16), str(out) + ".part", kind,
                     "--ggml-base", str(port.ggml_base)])
        os.replace(str(out) + ".part", out)
        os.replace(str(out) + ".part.note", note)
    return out, note.read_text().strip() if note.exists() else ""


def run_checked(cmd: list[str]) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"failed: {' '.join(cmd[:3])} ...: {' | '.join(tail)}")


def write_voice(path: Path, transcript: str, codes) -> None:
    """`codes` (10, T) as an s2.cpp voice profile: its version-1 layout (magic, version, codebooks, frames,
    sample rate, codebook size, then the transcript's and the codes' byte counts, the transcript with its NUL,
    the codes codebook by codebook as int32)."""
    k, t = codes.shape
    text = transcript.encode() + b"\0"
    data = codes.astype("<i4").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"S2VOICE\0" + struct.pack("<Iiiii", 1, k, t, 44100, 4096)
                     + struct.pack("<QQ", len(text), len(data)) + text + data)


# ----------------------------------------------------------------------------- quantizing (the side venv runs this)


def quantize_gguf(src: Path, dst: Path, kind: str, ggml_base: Path) -> None:
    """Copy `src` (f16 GGUF) to `dst` with the language model's 2-D tensors in `kind`, by ggml's own quantizer;
    streamed tensor by tensor, so that S2 Pro's shape never holds the whole file in memory."""
    import gguf
    import numpy as np

    lib = ctypes.CDLL(str(ggml_base))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_blck_size.restype = ctypes.c_int64
    lib.ggml_blck_size.argtypes = [ctypes.c_int]

    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dst), reader.get_field("general.architecture").contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        if field.name == "general.file_type":
            value = {"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_S}[kind]
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub)

    def target(t) -> int | None:
        """The ggml type this tensor becomes, or None to keep it."""
        if t.name.startswith("c.") or len(t.shape) != 2 or t.tensor_type != gguf.GGMLQuantizationType.F16:
            return None
        row = int(t.shape[0])
        for name in (kind, *FALLBACK[kind]):
            if row % lib.ggml_blck_size(GGML_TYPES[name]) == 0:
                return GGML_TYPES[name]
        return None

    plan = []
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape))  # numpy order: rows, then the row
        qtype = target(t)
        if qtype is None:
            writer.add_tensor_info(t.name, shape, np.float32, int(t.n_bytes), raw_dtype=t.tensor_type)
        else:
            nbytes = shape[0] * lib.ggml_row_size(qtype, shape[1])
            writer.add_tensor_info(t.name, shape, np.float32, nbytes, raw_dtype=gguf.GGMLQuantizationType(qtype))
        plan.append((t, qtype, shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    counts: dict[str, int] = {}
    for t, qtype, shape in plan:
        if qtype is None:
            writer.write_tensor_data(np.frombuffer(t.data.tobytes(), dtype=np.uint8))
            continue
        counts[gguf.GGMLQuantizationType(qtype).name] = counts.get(gguf.GGMLQuantizationType(qtype).name, 0) + 1
        rows, width = shape
        out = np.empty(rows * lib.ggml_row_size(qtype, width), dtype=np.uint8)
        step = max(1, (1 << 24) // width)  # ~64 MB of float32 at a time
        row_bytes = lib.ggml_row_size(qtype, width)
        for r in range(0, rows, step):
            chunk = np.ascontiguousarray(t.data[r:r + step], dtype=np.float32)
            n = chunk.shape[0]
            done = lib.ggml_quantize_chunk(qtype, chunk.ctypes.data, out[r * row_bytes:].ctypes.data, 0, n, width,
                                           None)
            assert done == n * row_bytes, (t.name, done, n * row_bytes)
        writer.write_tensor_data(out)
    writer.close()
    Path(str(dst) + ".note").write_text(", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items())) + "\n")


# ----------------------------------------------------------------------------- one run of each


@dataclass(frozen=True)
class Run:
    decode_fps: float
    first_frame_s: float
    prompt: int


def port_run(port: Port, gguf_path: Path, tokenizer: Path, voices: Path | None, text: str, frames: int,
             threads: int) -> Run:
    """One s2.cpp process: load, prefill, `frames` frames; stopped as soon as it prints its generation metrics."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads))
    voice = ["--voice", "bench", "--voice-dir", str(voices)] if voices is not None else []
    cmd = [str(port.binary), "-m", str(gguf_path), "-t", str(tokenizer), *voice, "--text", text,
           "--threads", str(threads), "--max-tokens", str(frames),
           "--min-tokens-before-end", str(frames), "--temp", "1.0", "--top-p", "0.9", "--top-k", "30",
           "--codec-cpu", "-o", os.devnull]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    lines: list[str] = []
    prompt = made = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if m := re.search(r"Prefilling (\d+) tokens", line):
                prompt = int(m.group(1))
            elif m := re.search(r"Done: (\d+) frames", line):
                made = int(m.group(1))
            elif m := re.search(r"Generate: prefill=([\d.]+) ms, loop=([\d.]+) ms", line):
                prefill, loop = float(m.group(1)) / 1000, float(m.group(2)) / 1000
                if made != frames:
                    raise SystemExit(f"s2.cpp made {made} frames, not {frames}")
                return Run(made / loop, prefill + loop / made, prompt or 0)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the port and nothing else
        proc.wait()
    raise SystemExit("s2.cpp stopped before its generation metrics:\n  " + "\n  ".join(lines[-8:]))


class Ours:
    """Our fast path on one loaded model, as `bench/frame_speed.py` times it."""

    def __init__(self, folder: Path, narrow: str, prompt, frames: int) -> None:
        sys.path.insert(0, str(ROOT / "bench"))
        import frame_speed as fs
        from s2studio.engine.weights.checkpoints import load_dual_ar
        from s2studio.engine.weights.narrow import narrowing_of
        from s2studio.text.tokenizer import S2Tokenizer

        self.fs = fs
        tok = S2Tokenizer.from_file(folder / "tokenizer.json")
        import torch

        self.model = load_dual_ar(folder, device=torch.device("cpu"), dtype=torch.float32, narrow=narrow,
                                  semantic_range=(tok.semantic_begin_id, tok.semantic_end_id), im_end_id=tok.im_end_id)
        self.narrowed = narrowing_of(self.model)
        self.decoder = fs.fast_decoder(self.model, tok, prompt.shape[1] + frames + 8)
        self.prompt, self.frames = prompt, frames

    def run(self, seed: int) -> Run:
        fs = self.fs
        sampler = fs.FastSampler(self.decoder, temperature=1.0, top_p=0.9, top_k=30,
                                 generator=fs.make_generator(seed, fs.DEVICE))
        first, total, n = fs.timed(fs.generate_frames_fast(self.decoder, self.prompt, sampler,
                                                           max_new_tokens=self.frames, reuse=False))
        return Run((n - 1) / (total - first), first, self.prompt.shape[1])


# ----------------------------------------------------------------------------- the table


def bench(args: argparse.Namespace, port: Port) -> None:
    from s2studio.threads import prepare_threads

    prepare_threads()  # passive OpenMP waits, as the studio and the CLI run (before torch is imported)
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    import numpy as np
    import torch

    from s2studio.demo_model import write_demo_model
    from s2studio.demo_model.codec_weights import write_codec_checkpoint
    from s2studio.engine.weights.cpu_gemv import available as kernels_available
    from s2studio.text.prompt import Reference, build_prompt
    from s2studio.text.tokenizer import S2Tokenizer

    sys.path.insert(0, str(ROOT / "bench"))
    import frame_speed as fs

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), project kernels "
          f"{'built' if kernels_available() else 'NOT built (ours falls back to torch)'}; s2.cpp {port.binary}; "
          f"{os.cpu_count()} CPUs, OMP_WAIT_POLICY=PASSIVE for both; {args.frames} frames a run, {args.runs} runs "
          f"(+1 warm-up) each, interleaved; {load()}")
    codec = work / "codec-full.pth"
    if not codec.exists():
        print("writing the full-size random codec (1.9 GB, once)", flush=True)
        write_codec_checkpoint(codec, seed=1, size="full")
    codes = np.random.default_rng(0).integers(0, 1024, size=(10, args.reference_frames)).astype(np.int64)
    voices = work / "voices" if args.reference_frames else None
    if voices is not None:
        write_voice(voices / "bench.s2voice", fs.REF_TEXT, codes)
    references = [Reference(fs.REF_TEXT, codes)] if args.reference_frames else []
    for size in args.sizes:
        folder = work / size
        if not (folder / "config.json").exists():
            print(f"writing the {size} demo model", flush=True)
            write_demo_model(folder, seed=1, size=size, codec=False)
        tok = S2Tokenizer.from_file(folder / "tokenizer.json")
        prompt = build_prompt(tok, references, [], fs.TEXT, 10)
        print(f"\n== {size}: decode frames/s (first frame ms); ratio = ours / s2.cpp", flush=True)
        for ours_kind, port_kind in PAIRS:
            if ours_kind not in args.precisions:
                continue
            gguf_path, note = gguf_of(port, work, size, folder, codec, port_kind)
            ours = Ours(folder, ours_kind, prompt, args.frames)
            label = f"{ours_kind} ({ours.narrowed.layers} layers) vs {port_kind}" + (f" ({note})" if note else "")
            for threads in args.threads:
                torch.set_num_threads(threads)
                ours.run(0)
                port_run(port, gguf_path, folder / "tokenizer.json", voices, fs.TEXT, args.frames, threads)
                mine, theirs = [], []
                for i in range(args.runs):
                    mine.append(ours.run(i + 1))
                    theirs.append(port_run(port, gguf_path, folder / "tokenizer.json", voices, fs.TEXT,
                                           args.frames, threads))
                a = statistics.median(r.decode_fps for r in mine)
                b = statistics.median(r.decode_fps for r in theirs)
                fa = statistics.median(r.first_frame_s for r in mine) * 1000
                fb = statistics.median(r.first_frame_s for r in theirs) * 1000
                print(f"  {label:44s} {threads} thr: ours {a:7.2f} ({fa:6.0f}), s2.cpp {b:7.2f} ({fb:6.0f}~)"
                      f"  {a / b:5.2f}x  [prompt {mine[0].prompt} / {theirs[0].prompt} tokens, {load()}]",
                      flush=True)
            del ours
            gc.collect()  # the next precision's model loads into the memory this one held


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--s2cpp", type=Path, help="s2.cpp's CMake build folder (its s2 binary and ggml libraries)")
    p.add_argument("--python", type=Path, help="a venv's python with s2.cpp's converter packages")
    p.add_argument("--work", type=Path, default=Path("/tmp/s2cpp-speed"),
                   help="model folders and GGUF files, kept for reruns (several GB; delete when done)")
    p.add_argument("--sizes", nargs="*", default=["tiny", "mid"], help="demo model sizes (s2pro: S2's full shape)")
    p.add_argument("--precisions", nargs="*", default=[o for o, _ in PAIRS], choices=[o for o, _ in PAIRS])
    p.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    p.add_argument("--frames", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--reference-frames", type=int, default=215,
                   help="frames of the prompt's reference (215: 10 s; 0: the sentence alone, e.g. for s2pro, whose "
                        "prefill of a 10 s reference takes tens of seconds a run here)")
    p.add_argument("--quantize", nargs=3, metavar=("SRC", "DST", "KIND"), help=argparse.SUPPRESS)
    p.add_argument("--ggml-base", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quantize:  # run by the side venv's python: gguf and numpy only, no project imports
        src, dst, kind = args.quantize
        quantize_gguf(Path(src), Path(dst), kind, args.ggml_base)
        return 0
    port = find_port(args.s2cpp, args.python)
    if isinstance(port, str):
        print(f"s2cpp_speed: not run: {port}")
        return 2
    sys.path.insert(0, str(ROOT))
    bench(args, port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
