"""`s2studio serve --model DIR`: the studio's engine and voice library over HTTP.

Loads one model at start, then answers OpenAI's `/v1/audio/speech`, Fish's `/v1/tts` and the studio's own
`/v1/s2studio/*` routes. Listens on 127.0.0.1 unless `--host` says otherwise, and any other address needs an
API key, given in the environment variable S2STUDIO_API_KEY (a key on the command line is visible to every user
of the computer in `ps`); the server refuses to start without one. It computes as the studio's default mode does
(the fast path) unless `--no-fast` asks for the exact one, and says which mode serves. The port is taken before
the model loads, so a port in use is said at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from s2studio.commands.setting_args import choice_option, loading_from_args, number_option, speed_option
from s2studio.errors import UserError

ENV_API_KEY = "S2STUDIO_API_KEY"
log = logging.getLogger("s2studio.serve")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve the engine and voice library over HTTP (OpenAI and Fish APIs)",
                              description=__doc__.splitlines()[0] if __doc__ else None,
                              epilog=f"The API key is read from ${ENV_API_KEY}; limits and timeouts are listed in "
                                     "the README. Voices clients upload (POST /v1/audio/voices) are kept in the data "
                                     "folder's uploaded-voices/, at most 256 voices and 128 MB of clips: past that, "
                                     "an upload evicts the voices used least recently (never one a running request "
                                     "speaks with), and a client naming an evicted voice is told to upload it again.")
    p.add_argument("--model", required=True, type=Path, metavar="DIR", help="model folder in the upstream layout")
    choice_option(p, "device", "auto", "where the model runs")
    choice_option(p, "precision", "auto", "auto: bf16 on CUDA, fp32 elsewhere")
    p.add_argument("--fast", action=argparse.BooleanOptionalAction, default=True,
                   help="the fast generation path, the studio's default (default: on); --no-fast: the exact mode, "
                        "the reference implementation's own loop, several times slower on a CPU")
    speed_option(p)
    choice_option(p, "quantize", "none", "weight-only quantisation")
    number_option(p, "threads", "CPU threads for torch")
    p.add_argument("--host", default="127.0.0.1",
                   help=f"address to listen on (default 127.0.0.1: this computer only; others need ${ENV_API_KEY})")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000, where SillyTavern looks)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help=f"discouraged: every user of this computer sees it in `ps`; set ${ENV_API_KEY} instead")
    p.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="allow browser pages from ORIGIN (e.g. http://localhost:3000) to call the server; repeatable")
    number_option(p, "max_batch", "requests generated at once, each a stream of one batch (automatic: as many as "
                  "the memory holds, at most 8 on a CPU; the exact loop runs one)")
    p.add_argument("--queue", type=int, default=16, metavar="N",
                   help="requests that may wait beyond those running (default 16)")
    p.add_argument("--max-text", type=int, default=4096, metavar="CHARS", help="longest text (default 4096)")
    p.add_argument("--max-body-mb", type=int, default=32, metavar="MB", help="largest request body (default 32)")
    p.add_argument("--max-reference-seconds", type=float, default=30.0, metavar="S",
                   help="longest inline reference clip (default and most: 30)")
    p.add_argument("--max-new-tokens", type=int, default=4096, metavar="N",
                   help="most frames one batch may generate (default 4096, about 190 s); requests asking more get N")
    p.add_argument("--max-connections", type=int, default=64, metavar="N",
                   help="open connections kept (default 64); past it the longest-idle one is closed")
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="seconds a client has to send a request's headers (default 10; 408 after)")
    p.add_argument("--body-timeout", type=float, default=20.0, metavar="S",
                   help="seconds a request body may stall between pieces (default 20; 408 after)")
    p.add_argument("--model-id", default="s2-pro", help="the model name /v1/models lists (default s2-pro)")


def mode_name(speed: str, quantize: str) -> str:
    """The mode as the studio's settings name it, for the line that says what serves."""
    if speed == "exact":
        return "the exact mode"
    return {"int8": "the 8-bit fast mode", "int4": "the 4-bit fast mode"}.get(quantize, "the fast mode")


def api_key(args: argparse.Namespace) -> str | None:
    """The key from the environment, or from --api-key with a warning (visible to every local user in `ps`)."""
    if args.api_key:
        print(f"warning: --api-key is visible to every user of this computer (`ps`); set {ENV_API_KEY} instead",
              file=sys.stderr)
        return args.api_key
    return os.environ.get(ENV_API_KEY) or None


def run(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError as exc:
        raise UserError(f"serving needs {exc.name}; install the server extra: pip install 's2studio[serve]'") from None
    from s2studio import paths
    from s2studio.engine.api import ModelLoading
    from s2studio.engine.plan import load_request
    from s2studio.serve.config import Limits, ServeConfig
    from s2studio.serve.references import remove_stale_folders
    from s2studio.serve.server import bind, return_large_buffers, serve_forever, start_state
    from s2studio.serve.uploads import UploadedVoices
    from s2studio.state.audio_limits import MAX_REFERENCE_SECONDS
    from s2studio.state.voices import VoiceLibrary

    if min(args.queue, args.max_text, args.max_body_mb, args.max_new_tokens, args.max_connections) < 1:
        raise UserError("--queue, --max-text, --max-body-mb, --max-new-tokens and --max-connections must be positive")
    if min(args.header_timeout, args.body_timeout) <= 0:
        raise UserError("--header-timeout and --body-timeout must be positive")
    if not 0 < args.max_reference_seconds <= MAX_REFERENCE_SECONDS:
        raise UserError(f"--max-reference-seconds must be above 0 and at most {MAX_REFERENCE_SECONDS:g}")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, got {args.port}")
    if not args.model.is_dir():
        raise UserError(f"model folder {args.model} does not exist or is not a folder")
    limits = Limits(max_body_bytes=args.max_body_mb * 1024 * 1024, max_text_chars=args.max_text,
                    max_reference_seconds=args.max_reference_seconds, queue_size=args.queue,
                    max_new_tokens=args.max_new_tokens, max_connections=args.max_connections,
                    header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout)
    config = ServeConfig(host=args.host, port=args.port, api_key=api_key(args), cors_origins=tuple(args.cors),
                         limits=limits, model_id=args.model_id)
    load = load_request("load", args.model, loading_from_args(args))
    sock = bind(args.host, args.port)  # a port in use is said before the model loads

    def loading(event: object) -> None:
        if isinstance(event, ModelLoading) and event.message:
            print(f"  {event.message}", file=sys.stderr, flush=True)

    remove_stale_folders()
    return_large_buffers()
    print(f"loading {args.model} …", file=sys.stderr, flush=True)
    uploads = UploadedVoices(folder=paths.data_dir() / "uploaded-voices")
    state = start_state(config, load, VoiceLibrary(paths.voices_dir()), on_loading=loading, uploads=uploads)
    info = state.info
    if info.kernels_note:
        print(f"note: the CPU kernels are not used ({info.kernels_note})", file=sys.stderr, flush=True)
    mode = mode_name(load.speed, load.quantize)
    batch_origin = " (--max-batch)" if args.max_batch else " (what the memory holds)"
    print(f"serving {info.name} in {mode} ({info.device}, {info.settings_text()}) at http://{args.host}:{args.port} "
          f"{'with an API key' if config.api_key else 'without an API key (loopback only)'}; "
          f"{info.max_batch} request(s) at once{batch_origin}; "
          f"{len(state.library.list())} voice(s) from {paths.voices_dir()}, {len(uploads.list())} uploaded by clients", file=sys.stderr, flush=True)
    log.info("serving %s on %s (%s, %s) from %s", info.name, info.device, info.settings_text(), mode, args.model)
    serve_forever(state, sock=sock)
    return 0
