"""Write the LM goldens of this CPU: codes from an independent S2 implementation, for the parity tests.

Dev-only. Run it with the side venv that has the independent port `mizuoto-fishspeech` installed (torch as the
project pins it, plus `mizuoto-fishspeech` and `mizuoto` from PyPI):

    .venv-ref/bin/python tools/make_lm_goldens.py [--only CASE ...]

Float kernels differ between CPU instruction sets, so the files go to the set of the running capability
(`tests/golden_sets.py`): `tests/golden/lm/` for the first set (AVX512), `tests/golden/lm/<CAPABILITY>/` for
any other, with a `manifest.json` naming the machine, capability, torch and port that made it. About 90 s on
one AVX2 core.

For each case it writes our seeded demo model folder (`s2studio.demo_model`, imported from this checkout),
loads it with mizuoto-fishspeech on CPU in float32 with one thread, and runs that port's own `generate_long`
with a `torch.Generator` seeded with the case's seed (equal, on CPU, to upstream's `torch.manual_seed`; spec
§6.5). It records the codes of every batch, the prompt matrix it built for every batch, the inputs, and the
environment (`torch.__version__`, `torch.backends.cpu.get_cpu_capability()`), since float kernels differ
between builds and ISAs (spec §11.1).

Attention (spec §10 #1): the port attends over the filled part of a growing cache, upstream over its whole
static cache of `find_multiple(max_seq_len, 8)` zero-filled slots, which changes logits by ~1e-5. We want
upstream's codes, so by default the port's slow attention is wrapped here to pad keys, values and the mask
to upstream's cache length (the spec author showed this makes the port's logits bit-identical to
upstream's). Each case is then run a second time without the wrapper and the file records whether the
port's native codes agree (`meta.port_native_codes_equal`). Nothing of the port is copied here; it is only
called.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from golden_sets import GOLDEN, MANIFEST, folder_to_write, cases_to_make, machine, port_version, write_manifest  # noqa: E402

from s2studio.demo_model import folder_digest, write_demo_model  # noqa: E402

MADE_BY = "tools/make_lm_goldens.py with mizuoto-fishspeech (independent port), CPU fp32, static-cache attention"

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    seed: int
    temperature: float = 0.8
    top_p: float = 0.8
    max_new_tokens: int = 48
    chunk_length: int = 200
    reference_texts: tuple[str, ...] = ()
    reference_frames: tuple[int, ...] = ()
    """Frames of each reference's random codes (10, N); row 0 < 4096, rows 1..9 < 1024."""
    model: dict = field(default_factory=dict)
    """`write_demo_model` keyword arguments besides the path (seed defaults to 0)."""


DIALOGUE = (
    "<|speaker:0|>Did you hear that? Someone is at the door."
    "<|speaker:1|>[laughing] It's only the cat."
    "<|speaker:0|>At this hour?"
    "<|speaker:1|>Cats keep their own time, you know."
    "<|speaker:0|>Fine. Go and let it in."
)

CASES: tuple[Case, ...] = (
    Case("no_reference", "Hello there, how are you today?", seed=1, max_new_tokens=0),
    Case("one_reference", "The quick brown fox jumps over the lazy dog.", seed=2, max_new_tokens=96,
         reference_texts=("Good evening, everyone.",), reference_frames=(23,)),
    Case("two_references_one_tagged", "<|speaker:0|>Welcome back.<|speaker:1|>Thank you, it is good to be here.", seed=3,
         max_new_tokens=96, reference_texts=("I am the first voice.", "<|speaker:1|>And I am the second."),
         reference_frames=(17, 12)),
    Case("dialogue_chunk40", DIALOGUE, seed=4, chunk_length=40, temperature=1.0, top_p=0.9, max_new_tokens=96,
         reference_texts=("Hello.", "Hi!"), reference_frames=(9, 11)),
    Case("dialogue_chunk60", DIALOGUE, seed=5, chunk_length=60, max_new_tokens=40),
    Case("six_turns_group_of_five", "".join(f"<|speaker:{i % 2}|>Line {i}." for i in range(6)), seed=1,
         chunk_length=1000, temperature=1.0, top_p=0.9, max_new_tokens=64),
    Case("text_before_first_tag", "This part is dropped by upstream.<|speaker:0|>Only this is spoken.<|speaker:1|>And this.",
         seed=2, temperature=1.0, top_p=0.9, max_new_tokens=96),
    Case("hits_max_new_tokens", "A long sentence that would take many frames to say out loud.", seed=3, max_new_tokens=6),
    Case("sharded_model", "Sharded weights, same numbers.", seed=4, max_new_tokens=96, model={"seed": 7, "shards": 3}),
    Case("variant_untied_projected_fast_qknorm", "<|speaker:0|>Variants upstream supports.", seed=5, max_new_tokens=96,
         model={"seed": 11, "tie_word_embeddings": False, "fast_dim": 48, "fast_attention_qk_norm": True}),
    Case("pth_dual_ar", "A fine-tuned checkpoint in model.pth.", seed=1, temperature=1.0, top_p=0.9, max_new_tokens=96,
         model={"seed": 13, "weights_format": "pth"}),
    Case("context_32768", "<|speaker:0|>S2's own context length: every step attends over 32768 cache slots.", seed=2,
         max_new_tokens=24, reference_texts=("A reference.",), reference_frames=(15,),
         model={"seed": 17, "max_seq_len": 32768}),
    # chunk_length counts UTF-8 bytes of the raw text; the tokenizer NFC-normalises (e + combining acute)
    Case("unicode_bytes_nfc", "<|speaker:0|>Cafe\u0301 ist schön.<|speaker:1|>こんにちは、元気ですか。<|speaker:0|>Très bien.",
         seed=4, chunk_length=30, max_new_tokens=64, temperature=0.7, top_p=0.7),
    # no tag: the whole text is one batch, whitespace and newlines untouched
    Case("untagged_whitespace", "  Hello.\nSecond line, no tags.  ", seed=5, max_new_tokens=64,
         reference_texts=("A transcript\nwith a newline ",), reference_frames=(8,)),
)


def reference_codes(case: Case) -> list[np.ndarray]:
    """Random reference codes (10, N) from the case's seed: codebook 0 < 4096, residual codebooks < 1024."""
    rng = np.random.default_rng(1000 + case.seed)
    out = []
    for n in case.reference_frames:
        codes = np.empty((10, n), dtype=np.int64)
        codes[0] = rng.integers(0, 4096, n)
        codes[1:] = rng.integers(0, 1024, (9, n))
        out.append(codes)
    return out


# ----------------------------------------------------------------------------- the port


def load_port(folder: Path):
    """The port's tokenizer and model, loaded as its engine loads them (fp32, CPU, strict)."""
    from mizuoto.runtime import ops
    from mizuoto.runtime.loading import load_into
    from mizuoto.text.tokenize.bpe import load_bpe
    from mizuoto_fishspeech.engine import _weights
    from mizuoto_fishspeech.model import DualARTransformer, ModelArgs, remap_keys

    tokenizer = load_bpe(folder)
    config = ModelArgs.from_config(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    config.semantic_begin_id = tokenizer.token_to_id("<|semantic:0|>")
    config.semantic_end_id = tokenizer.token_to_id("<|semantic:4095|>")
    model = DualARTransformer(config, ops.default).to(dtype=torch.float32)
    load_into(model, remap_keys(_weights(folder)), what="Fish Speech language model")
    return tokenizer, model.eval()


class StaticCacheAttention:
    """Context manager: the port's slow attention over upstream's full static cache length (spec §10 #1)."""

    def __init__(self, cache_len: int) -> None:
        self.cache_len = cache_len

    def __enter__(self):
        from mizuoto.runtime.accel import attention
        from mizuoto_fishspeech import model as port

        self.port, self.original = port, port.Attention.attend
        cache_len = self.cache_len

        def attend(this, q, k, v, mask, cache, math_kernel):
            if this.fast:
                return self.original(this, q, k, v, mask, cache, math_kernel)
            bsz, _, seqlen, _ = q.shape
            k, v = cache.update(k, v, mask.shape[-1])
            pad = cache_len - k.size(2)
            k, v = F.pad(k, (0, 0, 0, pad)), F.pad(v, (0, 0, 0, pad))  # zero slots, as upstream's fresh cache
            mask = F.pad(mask, (0, pad), value=False)  # the rows of upstream's L x L causal triangle
            rep = this.n_head // this.n_local_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            y = attention(q, k, v, site=port.STEP if math_kernel else port.SLOW, mask=mask)
            return y.transpose(1, 2).contiguous().view(bsz, seqlen, this.n_head * this.head_dim)

        port.Attention.attend = attend
        return self

    def __exit__(self, *exc) -> None:
        self.port.Attention.attend = self.original


def run_port(case: Case, folder: Path, refs: list[np.ndarray], static_cache: bool) -> tuple[list[np.ndarray], list[np.ndarray], list[str]]:
    """(codes per batch, prompt matrix per batch, batch texts) from the port's `generate_long`."""
    from mizuoto_fishspeech import generate as gen

    tokenizer, model = load_port(folder)
    prompts: list[np.ndarray] = []
    original_generate = gen.Decoder.generate

    def recording_generate(self, prompt, progress=None):
        prompts.append(prompt.numpy().astype(np.int64).copy())
        return original_generate(self, prompt, progress)

    gen.Decoder.generate = recording_generate
    cache_len = (model.config.max_seq_len + 7) // 8 * 8
    try:
        with StaticCacheAttention(cache_len) if static_cache else _nothing():
            sampling = gen.Sampling(temperature=case.temperature, top_p=case.top_p, max_new_tokens=case.max_new_tokens)
            generator = torch.Generator().manual_seed(case.seed)
            codes = [
                c.numpy().astype(np.int64).copy()
                for c in gen.generate_long(
                    model, tokenizer, case.text, list(case.reference_texts), [torch.from_numpy(r) for r in refs],
                    sampling, case.chunk_length, generator, check=lambda: None,
                )
            ]
    finally:
        gen.Decoder.generate = original_generate
    return codes, prompts, gen.batches_of(case.text, case.chunk_length)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


# ----------------------------------------------------------------------------- files


def make(case: Case, workdir: Path, out_dir: Path) -> Path:
    folder = workdir / case.name
    model_args = {"seed": 0, **case.model}
    write_demo_model(folder, codec=False, **model_args)
    refs = reference_codes(case)
    codes, prompts, batches = run_port(case, folder, refs, static_cache=True)
    native, _, _ = run_port(case, folder, refs, static_cache=False)
    native_equal = len(native) == len(codes) and all(np.array_equal(a, b) for a, b in zip(native, codes))
    env = machine()
    meta = {
        "format_version": FORMAT_VERSION,
        "case": case.name,
        "text": case.text,
        "reference_texts": list(case.reference_texts),
        "seed": case.seed,
        "temperature": case.temperature,
        "top_p": case.top_p,
        "top_k": 30,
        "max_new_tokens": case.max_new_tokens,
        "chunk_length": case.chunk_length,
        "batches": batches,
        "frames": [int(c.shape[1]) for c in codes],
        "model": model_args,
        "model_digest": folder_digest(folder),
        "device": "cpu",
        "dtype": "float32",
        "threads": env["threads"],
        "torch": env["torch"],
        "cpu_capability": env["cpu_capability"],
        "machine": env["machine"],
        "reference": port_version(),
        "attention": "static cache: slow attention padded to find_multiple(max_seq_len, 8) keys, as upstream",
        "port_native_codes_equal": native_equal,
    }
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta, ensure_ascii=False))}
    for i, r in enumerate(refs):
        arrays[f"reference_codes_{i}"] = r.astype(np.int16)
    for i, (c, p) in enumerate(zip(codes, prompts, strict=True)):
        arrays[f"codes_{i}"] = c.astype(np.int16)
        arrays[f"prompt_{i}"] = p.astype(np.int32)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{case.name}.npz"
    np.savez_compressed(out, **arrays)
    print(f"{case.name}: batches {meta['frames']} frames, port native codes equal: {native_equal} -> {out.relative_to(ROOT)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cases, only = cases_to_make(parser, CASES, argv)
    out_dir = folder_to_write("lm")
    recorded = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8")) if (out_dir / MANIFEST).is_file() else None
    if only and recorded is not None and recorded["torch"] != torch.__version__:
        parser.error(f"{out_dir.relative_to(GOLDEN)} was made with torch {recorded['torch']}, this is "
                     f"{torch.__version__}: remake the whole set (no --only), not a mix of builds")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            make(case, Path(tmp), out_dir)
    write_manifest(out_dir, MADE_BY, port_version(), [p.stem for p in out_dir.glob("*.npz")],
                   None if only else time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
