"""`s2studio demo-model DIR`: write a seeded random-weight model folder in S2 Pro's exact layout.

For trying the studio and the command line without downloading S2 Pro, for benchmarks (`--size mid`) and
for tests. The weights are noise: the folder speaks gibberish, deterministically (same seed, same bytes).
"""

from __future__ import annotations

import argparse
from pathlib import Path

SIZE_NAMES = ("tiny", "mid", "s2pro")
"""Mirrors `s2studio.demo_model.SIZES` (not imported here: that pulls in torch, and `--help` must stay fast)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo-model",
        help="write a random-weight model folder in S2 Pro's layout (for demos and tests)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="folder to write (created if missing)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--size", choices=SIZE_NAMES, default="tiny",
                   help="tiny: test model; mid: benchmark model; s2pro: S2 Pro's full shape, ~9 GB (default tiny)")
    p.add_argument("--shards", type=int, default=1,
                   help="split the safetensors weights into N shards with an index (default 1)")
    p.add_argument("--format", dest="weights_format", choices=("safetensors", "pth"), default="safetensors",
                   help="safetensors (as S2 ships) or model.pth with a flat dual_ar config (as a fine-tune saves)")
    p.add_argument("--untied", action="store_true", help="a separate output head instead of the tied embeddings")
    p.add_argument("--fast-dim", type=int, default=None, help="fast transformer width (≠ dim adds project_in)")
    p.add_argument("--fast-qk-norm", action="store_true", help="q/k norms in the fast transformer too")
    p.add_argument("--max-seq-len", type=int, default=None, help="context length (default: the size's)")
    p.add_argument("--no-codec", action="store_true", help="do not write codec.pth")


def run(args: argparse.Namespace) -> int:
    from s2studio.demo_model import write_demo_model

    path = write_demo_model(
        args.dir,
        seed=args.seed,
        size=args.size,
        shards=args.shards,
        weights_format=args.weights_format,
        tie_word_embeddings=False if args.untied else None,
        fast_dim=args.fast_dim,
        fast_attention_qk_norm=True if args.fast_qk_norm else None,
        max_seq_len=args.max_seq_len,
        codec=not args.no_codec,
    )
    print(path)
    return 0
