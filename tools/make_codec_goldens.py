"""Write the codec goldens of this CPU with an independent implementation.

Run with the reference venv, which has the `mizuoto-fishspeech` port (shown bit-identical to upstream on CPU
float32, spec s2-codec.md §14.2):

    .venv-ref/bin/python tools/make_codec_goldens.py            # tiny codec: set "codec"
    .venv-ref/bin/python tools/make_codec_goldens.py --full     # S2's full size (1.9 GB codec.pth in a temp
                                                                 # dir): set "codec/full", slow tests

Float kernels differ between CPU instruction sets, so a set is written for the running capability
(`tests/golden_sets.py`): `tests/golden/codec[/full]/` holds the first set (AVX512),
`tests/golden/codec[/full]/<CAPABILITY>/` any other; its `manifest.json` names the machine, capability, torch
and port. The tiny set takes about 6 s on one AVX2 core.

It writes our seeded tiny random `codec.pth` (the input data, in upstream's layout), loads it into the port,
and for each clip of `tests/codec_clips.py`: reads it with the port's WAV reader (numpy channel mean), resamples
with the port of `torchaudio.transforms.Resample`, encodes in float32; then decodes two code matrices and
stores the PCM16 samples `soundfile.write` produces. One thread, eager, CPU, as the tests run.
Nothing here is imported by the project or its tests; they only read the files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from codec_clips import CASES, CODEC_SEED, random_codes, write_clip  # noqa: E402
from golden_sets import folder_to_write, machine  # noqa: E402
from mizuoto.nn.dsp.resample import Resample  # noqa: E402
from mizuoto.nn.dsp.wav import read_wav  # noqa: E402
from mizuoto.runtime import ops  # noqa: E402
from mizuoto.runtime.loading import load_into, load_state_dict, unwrap  # noqa: E402
from mizuoto_fishspeech.codec import IGNORED, CodecConfig, FishCodec, TransformerConfig, codec_state  # noqa: E402

from s2studio.demo_model.codec_weights import write_codec_checkpoint  # noqa: E402

TINY = CodecConfig(
    encoder_dim=8, encoder_transformer_layers=[0, 0, 0, 1], latent_dim=128, decoder_dim=128,
    n_codebooks=9, codebook_size=32, codebook_dim=8, semantic_codebook_size=64,
    quantizer_transformer=TransformerConfig(n_layer=2, n_head=2, dim=128, intermediate_size=384, window_size=4),
)

DECODES = {  # name -> codes source
    "dec_random": lambda codes: random_codes(5, 45, over=40),  # values above the codebooks: clamped
    "dec_clip": lambda codes: codes["s22k"],
}
FULL_CASES = ("s22k", "m48k_long")
FULL_DECODES = {
    "dec_random": lambda codes: random_codes(5, 30, semantic=4096, residual=1024, over=100),
    "dec_clip": lambda codes: codes["s22k"],
}


def pcm16_as_written(audio: np.ndarray) -> np.ndarray:
    buf = io.BytesIO()
    sf.write(buf, audio.astype(np.float32), 44100, format="WAV", subtype="PCM_16")
    buf.seek(0)
    data, _ = sf.read(buf, dtype="int16")
    return data


def main() -> None:
    full = "--full" in sys.argv[1:]
    torch.set_num_threads(1)
    folder = folder_to_write("codec/full" if full else "codec")
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name, torch.inference_mode():
        tmp = Path(tmp_name)
        ckpt = tmp / "codec.pth"
        write_codec_checkpoint(ckpt, seed=CODEC_SEED, size="full" if full else "tiny")
        codec = FishCodec(CodecConfig() if full else TINY, ops.default)
        load_into(codec, codec_state(unwrap(load_state_dict(ckpt), "state_dict")), ignore=IGNORED, what="codec")
        codec.eval()

        codes: dict[str, np.ndarray] = {}
        lengths: dict[str, int] = {}
        for name, rate, channels, seconds, subtype in CASES:
            if full and name not in FULL_CASES:
                continue
            path = write_clip(tmp, name, rate, channels, seconds, subtype)
            if subtype == "FLOAT":  # the port's WAV reader has no float support; soundfile's scaling is identity
                data, rate = sf.read(str(path), dtype="float32", always_2d=True)
                mono = np.ascontiguousarray(data.mean(axis=1), dtype=np.float32)
            else:
                mono, rate = read_wav(path)
            wav = torch.from_numpy(mono)[None]
            if rate != 44100:
                wav = Resample(rate, 44100)(wav)
            lengths[name] = int(wav.shape[-1])
            out, _ = codec.encode(wav[None], torch.tensor([wav.shape[-1]]))
            codes[name] = out[0].numpy()
            print(f"{name}: {wav.shape[-1]} samples at 44.1 kHz -> codes {tuple(codes[name].shape)}")

        decodes: dict[str, np.ndarray] = {}
        for name, source in (FULL_DECODES if full else DECODES).items():
            c = np.asarray(source(codes), dtype=np.int64)
            decodes[name + "_codes"] = c
            audio = codec.from_indices(torch.from_numpy(c)[None].clone())[0, 0].numpy()
            decodes[name + "_pcm16"] = pcm16_as_written(audio)
            print(f"{name}: codes {c.shape} -> {audio.shape[0]} samples")

        np.savez_compressed(folder / "encode.npz", **{k: v.astype(np.int16) for k, v in codes.items()})
        np.savez_compressed(folder / "decode.npz", **{k: v.astype(np.int16) for k, v in decodes.items()})
        manifest = {
            "made_by": "tools/make_codec_goldens.py with mizuoto-fishspeech (independent port), CPU fp32, 1 thread",
            "codec_seed": CODEC_SEED,
            "codec_size": "full" if full else "tiny",
            "codec_sha256": hashlib.sha256(ckpt.read_bytes()).hexdigest(),
            "resampled_lengths": lengths,
            **machine(),
            "numpy": np.__version__,
            "reference": f"mizuoto-fishspeech {md.version('mizuoto-fishspeech')} (mizuoto {md.version('mizuoto')})",
            "seconds_to_make": round(time.perf_counter() - start, 1),
        }
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        print(f"-> {folder.relative_to(ROOT)} in {manifest['seconds_to_make']} s")


if __name__ == "__main__":
    main()
