"""`s2studio train-job`: the studio's fine-tuning in its own process (`train.job`); not listed in --help, since
people use `s2studio train`."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    subparsers.add_parser("train-job")  # no help=: argparse leaves it out of the command list


def run(_args: argparse.Namespace) -> int:
    from s2studio.train.job import serve

    return serve()
