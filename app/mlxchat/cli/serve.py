"""`mlxchat serve`: the model loaded once, an OpenAI- and Ollama-compatible
API over it, on loopback unless given a key."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, NoReturn

from mlxchat.cli.progress import progress_printer
from mlxchat.config import Settings
from mlxchat.errors import UsageError
from mlxchat.generation import CONTEXT_POLICIES
from mlxchat.server.options import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_KV_BUDGET,
    DEFAULT_PARALLEL,
    ServeOptions,
    check_options,
    check_origins,
)


def add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve the model over HTTP (the chat APIs clients speak)",
                       description="Serve the model over HTTP, in the APIs below; "
                       "conversations are ordinary sessions, their KV kept on disk.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _refuse_in_one_line(p)
    _list_routes(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; others need --api-key)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    p.add_argument("--model", "-m", help="catalog alias, HF repo id, MLX folder or .gguf file")
    p.add_argument("--api-key", help="required of every request (Bearer token or x-api-key); "
                   "visible to other users of this machine: prefer --api-key-file or "
                   f"${API_KEY_VARIABLE}")
    p.add_argument("--api-key-file", metavar="PATH",
                   help="read the key from this file (readable by you only: chmod 600)")
    p.add_argument("--queue", type=int, default=8, metavar="N",
                   help="requests that may wait for the engine before 503 (default 8)")
    p.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL, metavar="N",
                   help="conversations decoded at once, in one batch (default "
                   f"{DEFAULT_PARALLEL}: where aggregate speed stopped growing here); 1: one "
                   "at a time")
    p.add_argument("--allow-image-urls", action="store_true",
                   help="fetch the http(s) image URLs requests name (default: refused; "
                   "images come as data URLs); only public addresses are reached")
    p.add_argument("--allow-private-image-urls", action="store_true",
                   help="fetch image URLs from loopback, LAN and link-local addresses too "
                   "(implies --allow-image-urls)")
    p.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT_S,
                   metavar="S", help="seconds a request may take to send its whole body once "
                   f"its headers are in (default {DEFAULT_BODY_TIMEOUT_S:g}); a slower one "
                   "gets a 408")
    p.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (e.g. http://localhost:3000; * for any) "
                   "call the server from a browser; repeat for more (default: none)")
    p.add_argument("--tui", action="store_true",
                   help="run the chat in this terminal while serving, on the same loaded "
                   "model (quitting the chat stops the server)")
    p.add_argument("--context-policy", choices=CONTEXT_POLICIES, default="stop",
                   help="what a conversation past the window gets when its request names "
                   "no context_policy: stop (a 400, the default), compact (the oldest "
                   "messages summarized, prepared ahead) or drop_oldest")
    p.add_argument("--context", type=int, metavar="N",
                   help="cap each conversation's context window at N tokens (at most the "
                   "model's; default: the settings' context_window, else the model's): less "
                   "KV reserved per conversation, so more fit at once; longer prompts get a 400")
    p.add_argument("--kv-budget", default=KV_BUDGET_TEXT, metavar="SIZE",
                   help="disk for the API sessions' KV segments, e.g. 8G, 500M (default "
                   f"{KV_BUDGET_TEXT}); past it the least recently used sessions lose "
                   "their segments (never their messages) and recompute when used again")


def _list_routes(parser: argparse.ArgumentParser) -> None:
    """``--help`` ends with every route, from the routes the server mounts
    (imported only when the help is shown: the HTTP stack is heavy)."""
    plain = parser.format_help

    def format_help() -> str:
        from mlxchat.server.host_routes import help_text
        from mlxchat.server.protocols import PROTOCOLS

        parser.epilog = help_text(PROTOCOLS)
        return plain()

    parser.format_help = format_help  # type: ignore[method-assign]


def _refuse_in_one_line(parser: argparse.ArgumentParser) -> None:
    """argparse's refusals of `serve` (a bad value, an unknown flag) in one line,
    exit status 2, like the options' own checks, not after the usage."""
    def error(message: str) -> NoReturn:
        parser.exit(2, f"mlxchat: error: {message} (see mlxchat serve --help)\n")

    parse_known = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):  # type: ignore[no-untyped-def]
        parsed, extras = parse_known(args, namespace)
        if extras:
            error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


KV_BUDGET_TEXT = f"{DEFAULT_KV_BUDGET / 10**9:g}G"
API_KEY_VARIABLE = "MLXCHAT_API_KEY"
MAX_KEY_FILE_BYTES = 4096
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
    """'8G', '500M', '1.5GB', '0' -> bytes (decimal units)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not found:
        raise UsageError(f"--kv-budget must be a size such as 8G or 500M; got {text!r}")
    return int(float(found.group(1)) * _UNITS[found.group(2)])


def _key_from_file(given: str) -> str:
    """The key in ``given`` (its first line), which only its owner may read."""
    from mlxchat.files import FileRefused, read_limited

    path = Path(given).expanduser()
    try:
        mode = path.stat().st_mode
        data = read_limited(path, MAX_KEY_FILE_BYTES)
    except (OSError, FileRefused) as exc:
        text = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise UsageError(f"--api-key-file {given}: {text}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"--api-key-file {given} can be read by other users "
                        f"(mode {stat.S_IMODE(mode):o}); chmod 600 {given}")
    lines = data.decode("utf-8", "replace").strip().splitlines()
    if not lines or not lines[0].strip():
        raise UsageError(f"--api-key-file {given} is empty")
    return lines[0].strip()


def api_key(args: argparse.Namespace) -> str | None:
    """The key from --api-key-file, --api-key or $MLXCHAT_API_KEY (one of the flags at
    most; an empty one is refused rather than taken for no key)."""
    if args.api_key is not None and args.api_key_file is not None:
        raise UsageError("give --api-key or --api-key-file, not both")
    if args.api_key_file is not None:
        return _key_from_file(args.api_key_file)
    if args.api_key is not None:
        if not args.api_key.strip():
            raise UsageError("--api-key is empty: give a key (better with --api-key-file "
                             f"PATH or ${API_KEY_VARIABLE}), or leave the flag out")
        return args.api_key
    return os.environ.get(API_KEY_VARIABLE) or None


def serve_options(args: argparse.Namespace, *,
                  warn: Callable[[str], None] = lambda text: print(text, file=sys.stderr)
                  ) -> ServeOptions:
    """The options, checked: bad ones are refused in one line (exit status 2) before
    the model loads; a key given on the command line works but is said, once the
    options are good, to be visible to others."""
    options = ServeOptions(host=args.host, port=args.port, api_key=api_key(args),
                           queue=args.queue, kv_budget_bytes=parse_size(args.kv_budget),
                           parallel=args.parallel,
                           allow_image_urls=args.allow_image_urls
                           or args.allow_private_image_urls,
                           private_image_urls=args.allow_private_image_urls,
                           body_timeout_s=args.body_timeout, cors=check_origins(args.cors),
                           context_policy=args.context_policy)
    check_options(options)
    if args.api_key is not None:
        warn("mlxchat serve: a key given with --api-key can be read by every user of this "
             "machine (ps, /proc); use --api-key-file PATH or $" + API_KEY_VARIABLE)
    return options


def served_settings(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` with ``--context`` as every conversation's window cap (the flag
    wins over the settings file's ``context_window``); a value out of range is
    refused in one line (exit status 2) before the model loads, as ``ask --context``."""
    if args.context is None:
        return settings
    generation = replace(settings.generation, context_window=args.context)
    try:
        generation.check()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return replace(settings, generation=generation)


LOGGED = ("mlxchat.server.access", "mlxchat.server.core.kv_budget",
          "mlxchat.server.core.idle_join", "mlxchat.server.core.admission",
          "mlxchat.server.core.service")
"""What the server says on stderr: one line per request (``server/core/access_log.py``),
each eviction of --kv-budget, each idle join, the batch size in use and a
request held back for memory."""


def log_requests() -> None:
    """The server's lines (``LOGGED``) on stderr, each with its time."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mlxchat serve: %(asctime)s %(message)s",
                                           datefmt="%H:%M:%S"))
    for name in LOGGED:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def start_line(model: str, url: str, options: ServeOptions, parallel: int, window: int) -> str:
    """What ``serve`` says once it listens: every API and route, the conversations
    decoded at once and the window each gets, and the CORS origins."""
    from mlxchat.server.host_routes import start_line_routes
    from mlxchat.server.protocols import PROTOCOLS

    cors = f"; browsers from {', '.join(options.cors)}" if options.cors else ""
    return (f"mlxchat serve: {model} at {start_line_routes(url, PROTOCOLS)}; "
            f"{parallel} at once, {window:,} tokens of context each{cors}; ctrl-c stops")


def run_serve(args: argparse.Namespace, settings: Settings, *,
              need_terminal: Callable[[], None] = lambda: None) -> int:
    options = serve_options(args)
    settings = served_settings(args, settings)
    if args.tui:
        need_terminal()
        from mlxchat.tui.app import run_app
        from mlxchat.tui.pictures import probe

        probe(settings.images)  # before Textual reads stdin
        return run_app(settings, model=args.model, serve=options)
    from mlxchat.cli.ask import check_context
    from mlxchat.server.app import build_app, image_limits
    from mlxchat.server.core.service import ChatService
    from mlxchat.server.runner import RunningServer
    from mlxchat.session.root import open_conversation

    # SIGTERM (launchctl, systemd, Docker, kill) stops it as ctrl-c does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    log_requests()
    opened = open_conversation(settings, model_spec=args.model, progress=progress_printer())
    conv = opened.conversation
    if args.context is not None:  # the model's window is known once it is loaded
        try:
            check_context(conv.views.model_info, args.context)
        except UsageError:
            conv.shutdown()
            raise
    service = ChatService(conv, store=opened.store, engine=opened.engine,
                          max_waiting=options.queue, kv_budget_bytes=options.kv_budget_bytes,
                          parallel=options.parallel, context_policy=options.context_policy)
    if service.recovered:
        n = service.recovered
        print(f"mlxchat serve: kept {n} {'reply' if n == 1 else 'replies'} a killed run was "
              "streaming, as far as it was checkpointed (marked stopped)", file=sys.stderr)
    server = RunningServer(build_app(service, api_key=options.api_key,
                                     allow_image_urls=options.allow_image_urls,
                                     image_fetch=image_limits(options), cors=options.cors),
                           host=args.host, port=args.port, body_timeout_s=options.body_timeout_s)
    try:
        service.warm_up()  # before listening: the first request is served warm
        server.start()
        print(start_line(service.model_id, server.url, options, service.parallel,
                         service.window),
              file=sys.stderr, flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        # A second signal now would cut the shutdown short (replies unstored, the
        # server left up): it is bounded, so further ones are ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # The turns first: a stream cut short says so (server_stopped) and its reply
        # is stored; then the server, whose streams have ended.
        service.close()
        server.stop()
        conv.shutdown()
    return 0
