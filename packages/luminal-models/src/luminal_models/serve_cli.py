"""`luminal serve`: an OpenAI-compatible HTTP server (see `luminal_models.server`)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys

from .cli_options import add_model_options, checked, cpu_settings_from_args, load_generator

__all__ = ["HELP", "configure", "run"]

HELP = "serve a model over an OpenAI-compatible HTTP API (chat, completions, streaming)"

_EPILOG = """\
Endpoints: GET /v1/models, POST /v1/chat/completions, POST /v1/completions (both with
"stream": true for server-sent events), GET /health. Requests run one at a time in arrival
order on one compiled model. Sampling comes from each request (temperature, top_p, seed,
stop, max_tokens; also top_k, min_p, repeat_penalty). Ctrl-C or SIGTERM shuts down.

examples:
  luminal serve                                   # http://127.0.0.1:8080/v1
  luminal serve --port 9000 --model ./model.gguf
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]}'

Needs the serve extra: pip install 'luminal-models[serve]'.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `luminal serve`'s arguments."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: %(default)s; 0.0.0.0 exposes "
                             "the server to the network)")
    parser.add_argument("--port", "-p", type=checked(int, 0, 65535), default=8080,
                        help="TCP port; 0 picks a free one (default: %(default)s)")
    add_model_options(parser)
    parser.add_argument("--model-id", default=None, metavar="NAME",
                        help="the model's name in the API (default: 'smollm2' for the "
                             "default model, else the file or directory name)")
    parser.add_argument("--max-queue", type=checked(int, 1), default=64, metavar="N",
                        help="most requests waiting at once; more get HTTP 503 "
                             "(default: %(default)s)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bars and no request log")


def run(args: argparse.Namespace) -> int:
    """Execute `luminal serve`; returns the exit status."""
    try:
        import uvicorn

        from .server import Engine, Server, create_app
    except ImportError as exc:
        return _fail(f"{exc.name or exc} is missing: install the serve extra with "
                     "pip install 'luminal-models[serve]'")
    from .errors import HubError, ModelFileError
    from .hub import SMOLLM2_NAMES

    cpu_settings_from_args(args)
    try:
        sock = socket.create_server((args.host, args.port))
    except OSError as exc:
        return _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    with sock:
        try:
            generator, path = load_generator(args.model, args.backend, args.ctx,
                                             progress=not args.quiet, search=args.search)
        except KeyboardInterrupt:
            print("\nluminal serve: interrupted", file=sys.stderr)
            return 130
        except (ValueError, RuntimeError, FileNotFoundError, HubError, ModelFileError) as exc:
            return _fail(str(exc))
        default = args.model.lower() in SMOLLM2_NAMES
        model_id = args.model_id or ("smollm2" if default else path.name)
        aliases = tuple(SMOLLM2_NAMES) if default else ()
        engine = Engine(generator, model_id, aliases, max_queue=args.max_queue)
        host, port = sock.getsockname()[:2]
        config = uvicorn.Config(create_app(engine), log_level="warning",
                                access_log=not args.quiet, timeout_graceful_shutdown=10)
        server = Server(config, engine)
        print(f"luminal serve: {model_id} ({path.name} on {generator.backend_name}) at "
              f"http://{host}:{port}/v1 ; Ctrl-C stops", file=sys.stderr, flush=True)
        # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
        # previous handler: here that ends the process normally after the message below
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        with contextlib.suppress(KeyboardInterrupt):
            server.run(sockets=[sock])
    print("luminal serve: stopped", file=sys.stderr)
    return 0


def _fail(message: str) -> int:
    print(f"luminal serve: error: {message}", file=sys.stderr)
    return 1
