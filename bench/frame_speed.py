"""Frames/s of the exact and the fast generation paths, side by side: `python bench/frame_speed.py`.

A benchmark, not a test: it prints figures and asserts nothing. Four parts, all in one run so that the numbers
share the machine's load:

1. memory bandwidth: `torch.sum` over 1 GiB of float32, best of 7 (the bound for batch-1 decoding). Run
   nothing else meanwhile: a second busy process lowers every figure and the bound with it;
2. tiny and mid random demo models: decode frames/s and time to the first frame of the exact path, the fast
   path (float32 weights; then with the bf16-stored weights the engine's CPU fast path loads), the fast path
   with int8 weights (weight-only, and fbgemm's kernel that also rounds activations, for comparison), and the
   independent reference port `mizuoto-fishspeech` (run from `.venv-ref` in a subprocess by
   `tools/port_frame_speed.py`, on the same folder, prompt and seed);
3. S2 Pro's full shape: random bf16 weights for a SUBSET of the slow layers (default 4 of 36; full depth in
   float32 would need ~18 GB) and all 4 fast layers; the slow step is timed at 4 and 2 layers and scaled to 36
   (layers cost the same), the fast part (9 weight passes and 11 draws) is timed as it is. Printed beside the
   bandwidth bound: the frame's weight bytes / the bandwidth measured again just before that row. "(kernel)"
   rows use the project's CPU kernels (engine/weights/cpu_gemv.cpp), "(torch)" rows torch's own;
4. time to first audio in the engine's line mode (mid model, codec included): line 1 with a 10 s reference,
   then lines 2 and 3, on the exact path, the fast path without prefix reuse, with it (the engine's fast speed),
   and with it but the codec's exact streaming rules. Under each row, where each line's time went from the end
   of the line before: building prompts, the prefill of the new columns, the head's draws, the fast
   transformer, the codec's first push, the rest (`Stages` times the engine's calls from here). Then, for the
   fast speed: the same request through the studio's engine thread and queued signals (first audio as the GUI
   thread sees it, and the engine -> GUI hop), and the lines around a hop of the context window (the hop's prompt
   changes right after the references, so all of it is prefilled again; the line after it reuses it). `--ttfa-repeat N` runs the fast speed's request
   N more times (min and median per line); `--ttfa-fast-only` skips the other rows. Part 4 alone:
   `python bench/frame_speed.py --sizes --s2-layers 0 --threads 2 --ttfa-fast-only --ttfa-repeat 8`.

`<|im_end|>` is masked out of the sampler in parts 2 and 3 so that every run makes exactly `--frames` frames.
Decode frames/s = frames after the first / time after the first. S2 speaks 21.53 frames per second of audio.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fbgemm_int8 import pack_for_cpu  # noqa: E402
from s2studio.demo_model import write_demo_model  # noqa: E402
from s2studio.engine.api import FRAME_SAMPLES, SAMPLE_RATE  # noqa: E402
from s2studio.engine.s2.device import DTYPES  # noqa: E402
from s2studio.engine.s2.fast import FastDecoder, FastSampler, generate_frames_fast  # noqa: E402
from s2studio.engine.s2.generate import ensure_caches, generate_frames, make_generator, make_sampler  # noqa: E402
from s2studio.engine.weights.checkpoints import load_dual_ar  # noqa: E402
from s2studio.engine.weights.cpu_gemv import available as cpu_kernels_available  # noqa: E402
from s2studio.engine.weights.narrow import Narrow, narrow_linears  # noqa: E402
from s2studio.engine.weights.pages import on_huge_pages  # noqa: E402
from s2studio.model.config import DualARConfig, TransformerConfig  # noqa: E402
from s2studio.model.dual_ar import DualAR  # noqa: E402
from s2studio.settings import Sampling
from s2studio.text.prompt import Reference, build_prompt  # noqa: E402
from s2studio.text.tokenizer import S2Tokenizer  # noqa: E402

FPS_AUDIO = SAMPLE_RATE / FRAME_SAMPLES
UPSTREAM = Sampling(temperature=1.0, top_p=0.9, max_frames=0)
"""Upstream's command-line sampler (the figures do not depend on it)."""
TEXT = "<|speaker:0|>The quick brown fox jumps over the lazy dog, and then it runs far away."
REF_TEXT = "<|speaker:0|>A reference clip of a voice, read aloud."


DEVICE = torch.device("cpu")
"""Set by --device; with CUDA every timing waits for the GPU."""


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def load() -> str:
    return "load %.1f" % os.getloadavg()[0]


# ----------------------------------------------------------------------------- 1. bandwidth


def bandwidth() -> tuple[float, float, float, float]:
    """GB/s (1e9) reading 1 GiB of float32, best of 7: torch.sum (current threads), numpy's sum, torch copy_ (read +
    write counted), and torch.sum over the same values on 2 MiB pages, where the narrowed weights lie
    (`weights/pages.py`; on this project's machine ~20 % faster than 4 KiB pages; 0 where it gets none). The bound
    uses the best of them: a machine shared with other jobs only ever lowers it."""
    a = torch.ones(2**28, device=DEVICE)
    b = torch.empty_like(a)
    n = a.numpy() if DEVICE.type == "cpu" else None

    def rate(read, factor: int = 1) -> float:
        read()
        best = min(_timed(read) for _ in range(7))
        return factor * a.numel() * 4 / best / 1e9

    rates = rate(a.sum), rate(n.sum) if n is not None else 0.0, rate(lambda: b.copy_(a), 2)
    del b
    huge = on_huge_pages(a) if DEVICE.type == "cpu" else a
    return (*rates, rate(huge.sum) if huge is not a else 0.0)


def _timed(fn) -> float:
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


# ----------------------------------------------------------------------------- 2. demo models


def timed(frames_of) -> tuple[float, float, int]:
    """(seconds to the first yielded frame, total seconds, frames made) of one frame iterator."""
    t0 = time.perf_counter()
    first, kept = None, 0
    for _ in frames_of:
        if first is None:
            first = time.perf_counter()
        kept += 1
    end = time.perf_counter()
    return (first or end) - t0, end - t0, kept + 1  # the last frame made is dropped


def summarize(runs: list[tuple[float, float, int]]) -> tuple[float, float]:
    decode = statistics.median((n - 1) / (total - first) for first, total, n in runs)
    return decode, statistics.median(first for first, _, _ in runs)


def exact_runs(model, tok, prompt, frames: int, runs: int) -> tuple[float, float]:
    ensure_caches(model)

    def one(seed: int):
        # ignore_eos: every run makes exactly `frames` frames
        sampler = make_sampler(model, UPSTREAM, make_generator(seed, DEVICE), tok.im_end_id, ignore_eos=True)
        return timed(generate_frames(model, prompt, sampler, max_new_tokens=frames))

    one(0)
    return summarize([one(i + 1) for i in range(runs)])


def fast_decoder(model, tok, length: int) -> FastDecoder:
    """A FastDecoder whose head leaves out `<|im_end|>`, so that runs never stop early."""
    c = model.config
    return FastDecoder(model, tok.im_end_id, length=length,
                       allowed=torch.arange(c.semantic_begin_id, c.semantic_end_id + 1))


def fast_runs(model, tok, prompt, frames: int, runs: int, reuse: bool = False,
              graphs: bool = False) -> tuple[float, float]:
    decoder = fast_decoder(model, tok, prompt.shape[1] + frames + 8)

    def one(seed: int):
        sampler = FastSampler(decoder, temperature=1.0, top_p=0.9, top_k=30, generator=make_generator(seed, DEVICE),
                              graphs=graphs)
        return timed(generate_frames_fast(decoder, prompt, sampler, max_new_tokens=frames, reuse=reuse))

    one(0)
    return summarize([one(i + 1) for i in range(runs)])


def port_runs(folder: Path, prompt: np.ndarray, frames: int, runs: int, threads: int) -> tuple[float, float] | None:
    python = ROOT / ".venv-ref" / "bin" / "python"
    if not python.exists():
        return None
    with tempfile.NamedTemporaryFile(suffix=".npy", delete=False) as f:
        np.save(f, prompt)
    try:
        out = subprocess.run([str(python), str(ROOT / "tools" / "port_frame_speed.py"), str(folder), f.name,
                              "--frames", str(frames), "--runs", str(runs), "--threads", str(threads)],
                             capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(f.name)
    if out.returncode:
        print(f"  (reference port failed: {out.stderr.strip().splitlines()[-1:]})")
        return None
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["decode_fps"], result["first_frame_s"]


def demo_models(args: argparse.Namespace, tmp: Path) -> None:
    print(f"\n== 2. random demo models: decode frames/s (first frame ms), {args.frames} frames, "
          f"prompt = 10 s reference + a sentence, {args.precision} on {DEVICE}, seed 1..{args.runs}")
    for size in args.sizes:
        folder = write_demo_model(tmp / size, seed=1, size=size, codec=False)
        tok = S2Tokenizer.from_file(folder / "tokenizer.json")

        def reload(narrow: Narrow = "none") -> DualAR:
            return load_dual_ar(folder, device=DEVICE, dtype=DTYPES[args.precision], narrow=narrow,
                                semantic_range=(tok.semantic_begin_id, tok.semantic_end_id), im_end_id=tok.im_end_id)

        model = reload()
        codes = np.random.default_rng(0).integers(0, 1024, size=(10, 215)).astype(np.int64)
        prompt = build_prompt(tok, [Reference(REF_TEXT, codes)], [], TEXT, 10)
        rows = {}
        on_cpu = DEVICE.type == "cpu" and args.precision == "fp32"
        rows["port (mizuoto-fishspeech)"] = (port_runs(folder, prompt, args.frames, args.runs, args.threads)
                                             if on_cpu else None)
        rows["exact"] = exact_runs(model, tok, prompt, args.frames, args.runs)
        # on the CPU the engine loads the fast path with S2's bf16 weights kept (weights/bf16.py, "as loaded"); the
        # float32-weight row is torch's GEMV on widened weights, for comparison
        fast_name = "fast, fp32 weights (torch)" if DEVICE.type == "cpu" else "fast"
        rows[fast_name] = fast_runs(model, tok, prompt, args.frames, args.runs)
        if DEVICE.type == "cuda":
            rows["fast + CUDA graph tail"] = fast_runs(model, tok, prompt, args.frames, args.runs, graphs=True)
        if DEVICE.type == "cpu":  # what the engine's CPU fast path loads
            model = reload("bf16")
            rows["fast as loaded (bf16 weights)"] = fast_runs(model, tok, prompt, args.frames, args.runs)
        model = reload("int8")
        rows["fast + int8 weight-only"] = fast_runs(model, tok, prompt, args.frames, args.runs)
        if DEVICE.type == "cpu":
            pack_for_cpu(model)
            rows["fast + int8 fbgemm (8-bit act.)"] = fast_runs(model, tok, prompt, args.frames, args.runs)
        port = rows["port (mizuoto-fishspeech)"]
        print(f"{size} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M float params after int8, "
              f"prompt {prompt.shape[1]} tokens, {load()}):")
        for name, r in rows.items():
            if r is None:
                print(f"  {name:32s} (not run: .venv-ref missing, or not fp32 on the CPU)")
                continue
            vs = f"  {r[0] / port[0]:.2f}x the port" if port else ""
            print(f"  {name:32s} {r[0]:7.1f} frames/s  ({r[1] * 1000:6.1f} ms to the first frame){vs}")
        del model
        gc.collect()


# ----------------------------------------------------------------------------- 3. S2 Pro's shape


def s2_config(slow_layers: int) -> DualARConfig:
    def stack(layers: int, qk_norm: bool) -> TransformerConfig:
        return TransformerConfig(dim=2560, n_layer=layers, n_head=32, n_local_heads=8, head_dim=128,
                                 intermediate_size=9728, rope_base=1e6, norm_eps=1e-6, max_seq_len=32768,
                                 qk_norm=qk_norm, qkv_bias=False, o_bias=False)

    return DualARConfig(slow=stack(slow_layers, True), fast=stack(4, False), vocab_size=155776, codebook_size=4096,
                        num_codebooks=10, tie_word_embeddings=True, scale_codebook_embeddings=True,
                        norm_fastlayer_input=True, semantic_begin_id=151678, semantic_end_id=155773,
                        im_end_id=151645)


def random_s2(slow_layers: int) -> DualAR:
    """S2's shape with `slow_layers` slow layers and random bf16 weights (norms 1), built without a float32 copy."""
    with torch.device("meta"):
        model = DualAR(s2_config(slow_layers))
    g = torch.Generator().manual_seed(0)
    state = {}
    for name, p in model.named_parameters():
        state[name] = (torch.ones(p.shape, dtype=torch.bfloat16) if p.dim() == 1
                       else torch.randn(p.shape, dtype=torch.bfloat16, generator=g) * 0.02)
    model.load_state_dict(state, strict=True, assign=True)
    del state
    return model.to(DEVICE, torch.bfloat16).requires_grad_(False).eval()


class _Tok:
    im_end_id = 151645


def s2_frame_samples(model: DualAR, reps: int, context: int = 64, between=None
                     ) -> list[tuple[float, float, float]]:
    """`reps` samples of (slow step with all model layers, slow step with half of them, fast part) in seconds, after
    one untimed round; `between()` runs before each sample (`end_to_end.py` samples the bandwidth there, so that
    each frame has one measured beside it). `context`: positions already in the cache (every slow layer reads
    their keys and values at each step)."""
    decoder = fast_decoder(model, _Tok, context + 64)
    sampler = FastSampler(decoder, temperature=1.0, top_p=0.9, top_k=30, generator=make_generator(1, DEVICE))
    prompt = torch.zeros(11, context, dtype=torch.long, device=DEVICE)
    prompt[0] = torch.arange(context, device=DEVICE) % 4000 + 1000
    column = torch.zeros(11, 1, dtype=torch.long, device=DEVICE)
    column[0, 0] = 151678 + 7
    layers, caches = model.layers, decoder.caches.slow
    half = len(layers) // 2
    samples = []
    with torch.inference_mode():
        logits, hidden = decoder.prefill(prompt)

        def slow() -> float:
            return _timed(lambda: decoder.step(column))

        def fast() -> float:
            return _timed(lambda: sampler.frame(logits, hidden))

        def halved() -> float:
            model.layers, decoder.caches.slow = layers[:half], caches[:half]
            try:
                return slow()
            finally:
                model.layers, decoder.caches.slow = layers, caches

        slow(), halved(), fast()
        for _ in range(reps):
            if between is not None:
                between()
            samples.append((slow(), halved(), fast()))
    return samples


def s2_frame_time(model: DualAR, reps: int, context: int = 64) -> tuple[float, float, float]:
    """(slow step with all model layers, slow step with half of them, fast part) in seconds, each the best of
    `reps` (`s2_frame_samples`): the same statistic as the bandwidth it is compared with (best of 7), so that
    another process's burst of memory traffic on a shared machine inflates neither."""
    full, part, fast = zip(*s2_frame_samples(model, reps, context), strict=True)
    return min(full), min(part), min(fast)


def s2_shape(args: argparse.Namespace, ceiling: float) -> None:
    """Part 3; `ceiling`: the all-core bandwidth measured at the start (each row also measures its own)."""
    n = args.s2_layers
    print(f"\n== 3. S2 Pro's shape (dim 2560, 4 fast layers, vocab 155776), random weights, {n} of 36 slow layers "
          f"built and timed, scaled to 36; fast path, {args.threads} thread(s), {args.s2_context} cached positions")
    layer = 2560 * (4096 + 2 * 1024) + 4096 * 2560 + 3 * 2560 * 9728
    params_frame = 36 * layer + 4097 * 2560 + 9 * (4 * layer + 4096 * 2560)
    print(f"  weights read per frame: {params_frame / 1e9:.2f} G params (36 slow layers + 4097-row head + "
          "9 fast passes; fast positions 0 and 1 share one)")
    model = random_s2(n)
    # (name, bytes per weight read, change before timing); each change applies to the model the last one left
    runs = [("bf16 (torch)", 2, None), ("fp32 (torch)", 4, torch.float32),
            ("fp32 act., bf16 weights (kernel)", 2, "bf16 weights"),
            ("int8 weight-only, fp32 act. (kernel)", 1, "int8"), ("int8 fbgemm (8-bit act.)", 1, "pack"),
            ("int4 groups of 128 (kernel)", 0.5 + 4 / 128, "int4")]
    if DEVICE.type == "cuda":  # int8/int4 widen their rows on the fly there: memory, not speed
        runs = [("bf16", 2, None), ("int8 (widened per call)", 1, "int8"),
                ("int4 (widened per call)", 0.5 + 4 / 128, "int4")]
    for name, per_param, change in runs:
        if isinstance(change, torch.dtype):
            model.to(change)
        elif change == "bf16 weights":
            narrow_linears(model, "bf16")
        elif change == "int8":
            del model
            gc.collect()
            # float32 activations on the CPU, as the engine's default precision there runs them
            model = random_s2(n).cpu()
            narrow_linears(model, "int8")
            model.to(DEVICE, torch.float32 if DEVICE.type == "cpu" else torch.bfloat16)
        elif change == "pack":
            pack_for_cpu(model)
        elif change == "int4":
            del model
            gc.collect()
            model = random_s2(n).cpu()
            narrow_linears(model, "int4")
            model.to(DEVICE)
        gc.collect()
        bw = max(bandwidth())  # again for each row: on a shared machine the bandwidth drifts over minutes
        full, part, fast = s2_frame_time(model, args.s2_reps, args.s2_context)
        per_layer = (full - part) / (n - n // 2)
        if per_layer <= 0:  # the machine's load swamped the difference: fall back to the (head-inclusive) mean
            per_layer = full / n
            name += " (noisy)"
        frame = full + (36 - n) * per_layer + fast
        # plus the keys and values every slow layer reads (36 layers, 8 heads of 128, at the cache's dtype)
        cached = 36 * 2 * 8 * 128 * args.s2_context * model.embeddings.weight.element_size()
        bound, floor = ((params_frame * per_param + cached) / (rate * 1e9) for rate in (bw, max(bw, ceiling)))
        print(f"  {name:36s} slow layer {per_layer * 1000:5.1f} ms, slow step(36) {(frame - fast) * 1000:5.0f} ms, "
              f"fast part {fast * 1000:5.0f} ms, frame {frame:5.2f} s = RTF {frame * FPS_AUDIO:5.1f}; bound "
              f"{bound:4.2f} s (RTF {bound * FPS_AUDIO:4.1f}, {frame / bound:.2f}x), all-core bound {floor:4.2f} s "
              f"(RTF {floor * FPS_AUDIO:4.1f}, {frame / floor:.2f}x); {bw:.1f} GB/s  ({load()})")
    del model
    gc.collect()


# ----------------------------------------------------------------------------- 4. time to first audio


class Stages:
    """Milliseconds spent in named calls, for the first-audio breakdown. While entered it wraps the given
    methods (class, attribute, label) with a timer, so that the engine itself carries none; `reset` starts a new
    count, `stop` freezes it (the breakdown covers a line's start up to its first audio chunk only)."""

    def __init__(self, targets: list[tuple[object, str, str]]) -> None:
        self.targets = targets
        self.ms: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.counting = False
        self._saved: list[tuple[object, str, object]] = []

    def __enter__(self) -> Stages:
        for owner, name, label in self.targets:
            original = owner.__dict__[name]
            self._saved.append((owner, name, original))
            setattr(owner, name, self._timed(original, label))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    def _timed(self, fn, label: str):
        def timed_call(*a, **k):
            if not self.counting:
                return fn(*a, **k)
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.ms[label] = self.ms.get(label, 0.0) + (time.perf_counter() - t) * 1000
                self.calls[label] = self.calls.get(label, 0) + 1
        return timed_call

    def reset(self) -> None:
        self.ms.clear()
        self.calls.clear()
        self.counting = True

    def stop(self) -> dict[str, float]:
        self.counting = False
        return dict(self.ms)


def stage_targets(fast: bool) -> list[tuple[object, str, str]]:
    """What the breakdown times: building prompts (tokenising; the engine's context fitting builds several), the
    slow model over the new columns, the draws from its logits, the fast transformer, the codec's push."""
    from s2studio.codec.streaming import IncrementalDecoder
    from s2studio.engine.s2 import engine as engine_module, generate as generate_module
    from s2studio.engine.s2.sampling import FrameSampler

    prompts = [(engine_module, "encoded_length", "prompts"), (generate_module, "build_prompt", "prompts")]
    codec = [(IncrementalDecoder, "push", "codec")]
    if fast:
        return prompts + [(FastDecoder, "prefill", "prefill"), (FastSampler, "next_main", "head+draws"),
                          (FastSampler, "codes", "fast transformer")] + codec
    return prompts + [(DualAR, "forward_slow", "prefill"), (FrameSampler, "frame", "draws+fast transformer")] + codec


def first_audio(args: argparse.Namespace, tmp: Path) -> None:
    from s2studio.engine.api import (
        AudioChunk, LineFinished, LineSpec, LineStarted, LoadRequest, Reference as EngineReference,
        Sampling, SynthesisRequest,
    )
    from s2studio.engine.s2 import S2Engine

    size = args.ttfa_size
    folder = write_demo_model(tmp / f"{size}-codec", seed=1, size=size)
    print(f"\n== 4. time to first audio, engine line mode, {size} model + codec, {args.precision} on {DEVICE}; "
          "line 1 has a 10 s reference; ms from each line's start (LineStarted) to its first audio chunk, "
          "and below it where that time went, counted from the end of the line before (or the request's start)")
    codes = np.random.default_rng(0).integers(0, 32, size=(10, 215)).astype(np.int64)  # the tiny codec's codes
    lines = tuple(LineSpec(f"l{i}", 0, t) for i, t in enumerate(
        ["The first line of the scene, spoken at an even pace.", "Then a second line follows it.",
         "And a third line closes the scene."]))
    request = SynthesisRequest("b", lines, (EngineReference(0, "A reference clip of a voice, read aloud.", codes),),
                               Sampling(max_frames=args.ttfa_frames, seed_mode="fixed", seed=3))
    # (name, fast path, prefix reuse, the codec's exact streaming rules); the third row is the engine's fast speed
    variants = (("exact", False, True, True), ("fast, no reuse", True, False, False),
                ("fast + prefix reuse", True, True, False), ("  the same, exact codec", True, True, True))
    if getattr(args, "ttfa_fast_only", False):
        variants = variants[2:3]
    repeats = getattr(args, "ttfa_repeat", 0)
    for name, fast, reuse, exact_audio in variants:
        engine = S2Engine()
        loading = LoadRequest("l", folder, device=str(DEVICE), precision=args.precision,
                              speed="fast" if fast else "exact")
        for _ in engine.load(loading, threading.Event()):
            pass
        engine._loaded = replace(engine._loaded, exact_audio=exact_audio)
        decoder = engine._loaded.decoder if fast else None
        if decoder is not None and not reuse:
            decoder.reusable = lambda prompt: 0
        marks: list[str] = []
        breakdowns: list[str] = []
        before = decoder.prefilled if decoder is not None else 0
        with Stages(stage_targets(fast)) as stages:
            stages.reset()
            ended = time.perf_counter()
            for event in engine.generate(request, threading.Event()):
                if isinstance(event, LineStarted):
                    start, got = time.perf_counter(), False
                elif isinstance(event, AudioChunk) and not got:
                    got, now = True, time.perf_counter()
                    spent = stages.stop()
                    text = f"{(now - start) * 1000:6.0f} ms"
                    columns = ""
                    if decoder is not None:
                        text += f" (prefilled {decoder.prefilled - before} columns)"
                        columns = f" of {decoder.prefilled - before} columns"
                        before = decoder.prefilled
                    marks.append(text)
                    total = (now - ended) * 1000
                    rest = total - sum(spent.values())
                    parts = [f"{label}{columns if label == 'prefill' else ''} {ms:.1f}" for label, ms in spent.items()]
                    breakdowns.append(f"{total:6.0f} ms = " + " + ".join(parts) + f" + the rest {rest:.1f}")
                elif isinstance(event, LineFinished):
                    ended = time.perf_counter()
                    stages.reset()
        print(f"  {name:22s} " + " | ".join(f"line {i + 1}: {m}" for i, m in enumerate(marks)) + f"  ({load()})")
        for i, b in enumerate(breakdowns):
            print(f"  {'':22s}   line {i + 1}: {b}")
        if fast and reuse and not exact_audio:
            print(f"  {'':22s}   on the studio's GUI thread (engine thread + queued signals), the same request again "
                  + gui_side(engine, request, max(1, repeats)))
            if repeats:  # before past_the_window, which leaves another request's lines in the cache
                print(f"  {'':22s}   " + repeated(engine, request, repeats))
            print(f"  {'':22s}   " + past_the_window(engine, request))
        engine.unload()


def repeated(engine, request, times: int) -> str:
    """The same request `times` more times on the loaded engine: min and median first audio per line. Lines 2 on
    prefill the same new columns as in the first run (the cache holds the previous run's lines, whose codes are
    the same); line 1 then finds its whole prompt cached. A busy machine spreads single runs by 2x; the minimum
    over repeats is the figure least moved by other work."""
    from s2studio.engine.api import AudioChunk, LineStarted

    marks: dict[int, list[float]] = {}
    for _ in range(times):
        line = -1
        for event in engine.generate(request, threading.Event()):
            if isinstance(event, LineStarted):
                line, start, got = line + 1, time.perf_counter(), False
            elif isinstance(event, AudioChunk) and not got:
                got = True
                marks.setdefault(line, []).append((time.perf_counter() - start) * 1000)
    return f"the same request {times} more times, first audio min / median: " + " | ".join(
        f"line {i + 1}{' (all cached)' if i == 0 else ''} {min(m):.0f} / {statistics.median(m):.0f} ms"
        for i, m in sorted(marks.items())) + f"  ({load()})"


def past_the_window(engine, request) -> str:
    """Lines around a hop of the context window: with `context_lines` earlier lines kept (the studio's 6), line
    `context_lines + 2` no longer fits them all and drops the oldest half at once (engine/s2/context.py), so its
    prompt differs from the cached one right after the references and all it keeps is prefilled again; the line
    after it keeps that window and prefills only the line before's answer and its own turn, as the line before
    the hop did."""
    from dataclasses import replace as replaced

    from s2studio.engine.api import AudioChunk, LineSpec, LineStarted

    n = engine.context_lines + 3
    texts = [f"Line number {i + 1} of the scene says a few words." for i in range(n)]
    longer = replaced(request, job_id="w", lines=tuple(LineSpec(f"w{i}", 0, t) for i, t in enumerate(texts)))
    decoder = engine._loaded.decoder
    marks: list[str] = []
    for event in engine.generate(longer, threading.Event()):
        if isinstance(event, LineStarted):
            start, got, before = time.perf_counter(), False, decoder.prefilled
        elif isinstance(event, AudioChunk) and not got:
            got = True
            marks.append(f"{(time.perf_counter() - start) * 1000:.0f} ms ({decoder.prefilled - before} columns)")
    return (f"a {n}-line request, at most {engine.context_lines} earlier lines: line {n - 2} {marks[-3]}, "
            f"line {n - 1} (its window hops: the oldest half goes) {marks[-2]}, line {n} {marks[-1]}")


def gui_side(engine, request, times: int = 1) -> str:
    """First audio of each line as the studio's GUI thread sees it: the engine on `worker/host.py`'s engine thread,
    its events arriving as queued Qt signals while the engine goes on generating; the request `times` times
    (min / median per line: compare it with `repeated`'s figures, not with a single run's, since one run on a
    busy machine moves by tens of ms). Also the hop, the ms from the engine thread handing an event over to its
    slot running on the GUI thread (median and worst over the requests' events)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer

    from s2studio.worker.host import EngineHost

    app = QCoreApplication.instance() or QCoreApplication([])
    handed: dict[int, float] = {}

    class Stamped:
        """The engine, noting when each event leaves it for the worker's signal."""

        def generate(self, req, cancel):
            for event in engine.generate(req, cancel):
                handed[id(event)] = time.perf_counter()
                yield event

    host = EngineHost(lambda: Stamped())
    hops: list[float] = []
    marks: dict[int, list[float]] = {}
    line, started = [-1], [0.0]

    def on_line(event) -> None:
        hops.append(time.perf_counter() - handed[id(event)])
        line[0] += 1
        started[0] = time.perf_counter()

    def on_chunk(event) -> None:
        now = time.perf_counter()
        hops.append(now - handed[id(event)])
        if event.start_sample == 0:
            marks.setdefault(line[0], []).append(now - started[0])

    failed: list[str] = []
    loop = QEventLoop()
    host.line_started.connect(on_line)
    host.audio_chunk.connect(on_chunk)
    host.job_finished.connect(lambda _e: loop.quit())
    host.job_failed.connect(lambda e: (failed.append(e.error), loop.quit()))
    deadline = QTimer()  # one timer, restarted per run: a stale one-shot would quit a later run early
    deadline.setSingleShot(True)
    deadline.timeout.connect(loop.quit)
    for _ in range(times):
        line[0] = -1
        host.generate(request)
        deadline.start(600_000)
        loop.exec()
        deadline.stop()
        if failed:
            break
    host.shutdown()
    if failed:
        return f"(GUI-side run failed: {failed[0]})"
    del app
    hops.sort()
    lines = " | ".join(f"line {i + 1}: {min(m) * 1000:.0f}" + (f" / {statistics.median(m) * 1000:.0f}" if times > 1
                                                                else "") + " ms" for i, m in sorted(marks.items()))
    what = f"{times} times, min / median: " if times > 1 else ""
    return (f"{what}{lines}; hop engine -> GUI slot median {hops[len(hops) // 2] * 1000:.2f} ms, "
            f"worst {hops[-1] * 1000:.2f} ms over {len(hops)} events" if hops else "no events")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda (the reference port runs only for fp32 on the CPU)")
    p.add_argument("--precision", default=None, choices=sorted(DTYPES), help="default: fp32 on CPU, bf16 on CUDA")
    p.add_argument("--sizes", nargs="*", default=["tiny", "mid"])
    p.add_argument("--frames", type=int, default=64)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--s2-layers", type=int, default=4, help="slow layers built at S2's size (0: skip part 3)")
    p.add_argument("--s2-reps", type=int, default=5)
    p.add_argument("--s2-context", type=int, default=64,
                   help="positions in the cache for part 3 (a script's line with a 10 s reference: ~1000)")
    p.add_argument("--ttfa-size", default="mid")
    p.add_argument("--ttfa-frames", type=int, default=24)
    p.add_argument("--skip-ttfa", action="store_true")
    p.add_argument("--ttfa-fast-only", action="store_true",
                   help="part 4: only the engine's fast speed (fast + prefix reuse), not the exact and other rows")
    p.add_argument("--ttfa-repeat", type=int, default=0,
                   help="part 4: run the fast speed's request this many more times, print min and median per line")
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = torch.device(args.device)
    args.precision = args.precision or ("bf16" if DEVICE.type == "cuda" else "fp32")
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s), "
          f"{os.cpu_count()} CPUs, {load()}")
    if DEVICE.type == "cpu" and not cpu_kernels_available():
        print("  (the project's CPU kernels did not build: the kernel rows use torch's fallbacks; see the log)")
    rates = bandwidth()
    torch.set_num_threads(os.cpu_count() or 1)
    at_all_cores = bandwidth()
    ceiling = max(at_all_cores[:1] + at_all_cores[2:])  # every core reading (numpy's sum is one): the DRAM ceiling
    torch.set_num_threads(args.threads)
    bw = max(rates)
    print(f"\n== 1. memory bandwidth over 1 GiB of float32, best of 7, {args.threads} thread(s): torch.sum "
          f"{rates[0]:.1f}, numpy sum {rates[1]:.1f}, torch copy_ {rates[2]:.1f}, "
          f"torch.sum on 2 MiB pages {rates[3]:.1f} GB/s; all {os.cpu_count()} cores: "
          f"{ceiling:.1f} GB/s.\n   Bounds below: weight bytes / {bw:.1f} GB/s (this run's threads) and / "
          f"{max(bw, ceiling):.1f} GB/s (all cores)")
    with tempfile.TemporaryDirectory(prefix="frame-speed-") as tmp:
        demo_models(args, Path(tmp))
        if args.s2_layers:
            s2_shape(args, max(bw, ceiling))
        if not args.skip_ttfa:
            first_audio(args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
