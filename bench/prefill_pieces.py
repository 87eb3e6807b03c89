"""What the fast path's fixed prefill pieces cost: `python bench/prefill_pieces.py`.

A benchmark, not a test: it prints figures and asserts nothing. The fast path prefills every prompt in pieces
(each message, and every `PREFILL_PIECE` positions: `engine/s2/fast.py`), so that a reused piece has the bits a
fresh engine computes and a render never depends on what ran before. This times a fresh prefill of a line-mode
prompt (a 10 s reference, earlier lines, a sentence) on a random demo model in one call (what the path did before),
in its messages only, and in pieces of at most 512 to 64 positions, interleaved round by round so that the
machine's drift falls on every row alike; each figure is the median over rounds, and the ratio to one call is the median of the per-round
ratios. Then what a line's reuse costs now: the previous line's answer, generated one frame at a time, is
prefilled again with the next line (a fresh engine would prefill it in a piece), against reusing those keys as the
path did before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from s2studio.demo_model import write_demo_model  # noqa: E402
from s2studio.engine.s2.fast import PREFILL_PIECE, FastDecoder  # noqa: E402
from s2studio.engine.s2.setup import load_runtime  # noqa: E402
from s2studio.model.fast_forward import forward_slow  # noqa: E402
from s2studio.text.prompt import Exchange, Reference, build_prompt  # noqa: E402

FRAMES_PER_S = 21.53


def prompt_of(tok, lines: int, answer_frames: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 32, (10, round(10 * FRAMES_PER_S)))
    refs = [Reference("<|speaker:0|>A ten second reference clip says something in its own voice.", codes)]
    history = [Exchange(f"<|speaker:0|>Earlier line number {i + 1} says a few words.",
                        rng.integers(0, 32, (10, answer_frames))) for i in range(lines)]
    return torch.as_tensor(build_prompt(tok, refs, history, "<|speaker:0|>And now the next line is spoken."))


def timed_prefill(runtime, prompt: torch.Tensor, piece: int | None) -> float:
    """Seconds of a fresh decoder's prefill of `prompt` in pieces of `piece` (None: in one call, as before)."""
    decoder = FastDecoder(runtime.model, runtime.tokenizer.im_end_id, length=prompt.shape[1] + 8,
                          piece=piece or prompt.shape[1])
    start = time.perf_counter()
    with torch.inference_mode():
        if piece is None:
            forward_slow(runtime.model, decoder.caches, prompt, 0, decoder.head)
        else:
            decoder.prefill(prompt)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="mid", choices=("tiny", "mid"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=3, help="earlier lines in the prompt")
    parser.add_argument("--answer-frames", type=int, default=80, help="frames of each earlier line's answer")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_demo_model(Path(tmp) / args.size, seed=1, size=args.size)
        runtime = load_runtime(folder, device="cpu", precision="fp32", speed="fast", codec=False)
        prompt = prompt_of(runtime.tokenizer, args.lines, args.answer_frames)
        pieces = {"one call": None, "messages only": 1 << 20, **{f"pieces of {n}": n for n in (512, 256, 128, 64)}}
        timed_prefill(runtime, prompt, PREFILL_PIECE)  # warm-up: kernels, allocator
        seconds: dict[str, list[float]] = {name: [] for name in pieces}
        for _ in range(args.rounds):
            for name, piece in pieces.items():
                seconds[name].append(timed_prefill(runtime, prompt, piece))
        print(f"{args.size} model, {args.threads} thread(s), a fresh prefill of {prompt.shape[1]} columns "
              f"(10 s reference, {args.lines} earlier lines of {args.answer_frames} frames), median of "
              f"{args.rounds} rounds:")
        for name in pieces:
            ratio = statistics.median(b / a for a, b in zip(seconds["one call"], seconds[name]))
            print(f"  {name:15s} {statistics.median(seconds[name]) * 1000:8.1f} ms   {ratio:.2f}x one call")
        print(next_line(runtime, args))


def next_line(runtime, args: argparse.Namespace) -> str:
    """The prefill of the next line after one that generated `answer_frames` frames: now (its answer, made by decode
    steps, is prefilled again) against reusing the decode steps' keys as the path did before (emulated by marking
    them settled; not history-independent), median of rounds, interleaved."""
    tok = runtime.tokenizer
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 32, (10, round(10 * FRAMES_PER_S)))
    refs = [Reference("<|speaker:0|>A ten second reference clip says something in its own voice.", codes)]
    before = "<|speaker:0|>The line before says a few words."
    answer = rng.integers(0, 32, (10, args.answer_frames))
    first = torch.as_tensor(build_prompt(tok, refs, [], before))
    second = torch.as_tensor(build_prompt(tok, refs, [Exchange(before, answer)], "<|speaker:0|>The next line."))
    decoder = FastDecoder(runtime.model, tok.im_end_id, length=second.shape[1] + 8)
    times: dict[str, list[float]] = {"now": [], "reusing decode steps": []}
    columns: dict[str, int] = {}
    for _ in range(args.rounds):
        for name in times:
            with torch.inference_mode():
                decoder.prefill(first, reuse=False)
                for f in range(args.answer_frames):
                    decoder.step(second[:, first.shape[1] + f:first.shape[1] + f + 1])
                if name != "now":
                    decoder.settled = decoder.filled
                done = decoder.prefilled
                start = time.perf_counter()
                decoder.prefill(second)
                times[name].append(time.perf_counter() - start)
                columns[name] = decoder.prefilled - done
    now, old = statistics.median(times["now"]), statistics.median(times["reusing decode steps"])
    return (f"  the next line after a {args.answer_frames}-frame line ({args.answer_frames / FRAMES_PER_S:.1f} s): "
            f"prefills {columns['now']} columns in {now * 1000:.1f} ms; reusing the decode steps' keys it would "
            f"prefill {columns['reusing decode steps']} in {old * 1000:.1f} ms")

if __name__ == "__main__":
    main()
