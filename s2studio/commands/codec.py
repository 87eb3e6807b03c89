"""`s2studio codec encode|decode`: the codec alone, for checking voices, caching reference codes and parity tests.

    s2studio codec encode --model DIR IN_AUDIO --codes-out CODES.npy [--threads N]
    s2studio codec decode --model DIR CODES.npy --out OUT.wav [--stream-chunk N] [--threads N]

Codes are `(10, T)` int64 `.npy` files, the layout upstream's `dac/inference.py` saves. Decoding writes a
PCM16 WAV as upstream does; `--stream-chunk N` decodes through the incremental decoder N frames at a time
(the same path the studio uses while it generates), which should sound identical. The CPU's thread count is
part of the result (kernels sum in another order): `--threads 1` is upstream's single-thread decode bit for bit,
while at 2 threads about 0.75 % of the samples of S2 Pro's codec differ from it by 1 LSB.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from s2studio.commands.outputs import check_file, npy_bytes
from s2studio.errors import UserError, printable
from s2studio.state.atomic import write_bytes_atomic
from s2studio.state.codes import read_codes_file


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("codec", help="encode audio to S2 codes or decode codes to audio",
                              description=__doc__.splitlines()[0] if __doc__ else None)
    sub = p.add_subparsers(dest="codec_command", metavar="ACTION", required=True)
    enc = sub.add_parser("encode", help="audio file -> codes (.npy, (10, T) int64)")
    enc.add_argument("audio", type=Path, metavar="IN_AUDIO", help="any audio file (WAV, FLAC, OGG, MP3)")
    enc.add_argument("--codes-out", type=Path, required=True, metavar="CODES.npy", help="where to write the codes")
    dec = sub.add_parser("decode", help="codes (.npy) -> 44.1 kHz PCM16 WAV")
    dec.add_argument("codes", type=Path, metavar="CODES.npy", help="(10, T) integer codes")
    dec.add_argument("--out", type=Path, required=True, metavar="OUT.wav", help="WAV file to write")
    dec.add_argument("--stream-chunk", type=int, default=0, metavar="N",
                     help="decode incrementally, N frames at a time (default 0: all at once)")
    for q in (enc, dec):
        q.add_argument("--model", type=Path, required=True, metavar="DIR",
                       help="model folder with codec.pth (or the codec.pth itself)")
        q.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps or auto")
        q.add_argument("--threads", type=int, default=None, metavar="N",
                       help="CPU threads for torch (default: torch's); the decoded bits depend on it, 1 is upstream's")


def run(args: argparse.Namespace) -> int:
    if args.codec_command == "encode":
        return _encode(args)
    return _decode(args)


def _load(args: argparse.Namespace):
    """The codec alone, on the device and thread count asked for (the recipe's codec step; no language model)."""
    from s2studio.engine.s2.device import set_threads
    from s2studio.engine.s2.setup import load_codec_for

    set_threads(args.threads)
    return load_codec_for(args.model, args.device)


def _threads() -> str:
    import torch

    n = torch.get_num_threads()
    return f"{n} thread{'s' if n != 1 else ''}"


def _encode(args: argparse.Namespace) -> int:
    import numpy as np

    from s2studio.codec.resample import encode_file

    check_file(args.codes_out, "--codes-out", (".npy",))
    codec = _load(args)
    codes = encode_file(codec, args.audio)
    write_bytes_atomic(args.codes_out, npy_bytes(codes.astype(np.int64)))
    seconds = codes.shape[1] * codec.frame_length / codec.sample_rate
    print(f"{printable(args.audio.name)}: {codes.shape[1]} frames ({seconds:.2f} s) -> {printable(args.codes_out)} "
          f"({_threads()})",
          file=sys.stderr)
    return 0


def _decode(args: argparse.Namespace) -> int:
    import torch

    from s2studio.audio.io import wav_bytes
    from s2studio.codec.streaming import decode_in_chunks

    if args.stream_chunk < 0:
        raise UserError("--stream-chunk must be 0 (all at once) or a positive number of frames")
    if args.out.suffix.lower() != ".wav":
        raise UserError(f"--out must be a .wav file, got {printable(args.out.name)}")
    check_file(args.out, "--out")
    codes = _load_codes(args.codes)
    codec = _load(args)
    codes_t = codec.check_codes(torch.from_numpy(codes))  # a clear error before any work
    if args.stream_chunk:
        audio = decode_in_chunks(codec, codes_t[0], args.stream_chunk)
    else:
        audio = codec.decode(codes_t).reshape(-1).float().cpu().numpy()
    write_bytes_atomic(args.out, wav_bytes(audio, codec.sample_rate))
    print(f"{codes.shape[-1]} frames -> {audio.shape[0] / codec.sample_rate:.2f} s -> {printable(args.out)} "
          f"({_threads()})",
          file=sys.stderr)
    return 0


def _load_codes(path: Path):
    import numpy as np

    codes = read_codes_file(path, "codes")
    if codes.ndim == 3 and codes.shape[0] == 1:
        codes = codes[0]
    if codes.ndim != 2 or codes.shape[0] != 10:
        raise UserError(f"{printable(path.name)} has shape {codes.shape}; codes are (10, frames)")
    if not np.issubdtype(codes.dtype, np.integer):
        raise UserError(f"{printable(path.name)} holds {codes.dtype} values; codes are integers")
    return codes.astype(np.int64)
