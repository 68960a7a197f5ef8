"""Command line: parse arguments and wire settings, models, engine, store and UI.

The only module that imports both the engine side and the TUI (lazily).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from mlxchat import __version__, blas, native
from mlxchat.cli.progress import progress_printer
from mlxchat.errors import UsageError, UserError, user_message
from mlxchat.generation import CONTEXT_POLICIES, CPU_MATMUL_MODES


def _add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", help="catalog alias, HF repo id, MLX folder or .gguf file")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--max-tokens", type=int, help="longest answer in tokens")
    p.add_argument("--max-reasoning-tokens", type=int,
                   help="longest reasoning in tokens (models that think)")
    p.add_argument("--think", choices=("on", "off"),
                   help="turn the model's reasoning on or off (templates that read it)")
    p.add_argument("--reasoning-effort", choices=("low", "medium", "high"),
                   help="for templates that take it (gpt-oss)")
    p.add_argument("--temp", type=float, help="sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, help="nucleus sampling threshold (0-1]")
    p.add_argument("--min-p", type=float, help="drop tokens below this share of the top one")
    p.add_argument("--seed", type=int, help="random seed for reproducible sampling")
    p.add_argument("--repetition-penalty", type=float, help="1.0 disables")
    p.add_argument("--kv-bits", type=int, choices=(4, 8), help="quantize the KV cache")
    p.add_argument("--context", type=int, metavar="N",
                   help="cap the context window at N tokens (stored with the session)")
    p.add_argument("--context-policy", choices=CONTEXT_POLICIES,
                   help="what to do when the conversation outgrows the window")
    p.add_argument("--draft", metavar="SPEC",
                   help="speculate with this draft model (same tokenizer; 'auto': the "
                        "catalog's pairing)")
    p.add_argument("--cpu-matmul", choices=CPU_MATMUL_MODES,
                   help="how quantized layers multiply on the CPU (auto: measured)")
    p.add_argument("--speculative", choices=("off", "lookup", "draft"),
                   help="speculative decoding: lookup proposes from the text so far")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlxchat",
        description="A private chat app for the terminal on local MLX models. "
                    "With no command, opens the chat UI.")
    parser.add_argument("--version", action="version", version=f"mlxchat {__version__}")
    parser.add_argument("--model", "-m", help="model for new sessions (default: config)")
    parser.add_argument("--continue", "-c", dest="continue_last", action="store_true",
                        help="reopen the most recent session")
    parser.add_argument("--session", "-s", help="open a saved session by id or title")
    parser.add_argument("--context", type=int, metavar="N",
                        help="cap the context window of new sessions at N tokens")
    parser.add_argument("--hosts", metavar="HOSTFILE",
                        help="split the model over the hosts of this mlx.launch hostfile "
                             "(its backend: ring, or jaccl / jaccl-ring over Thunderbolt 5 RDMA; "
                             "this process is rank 0)")
    parser.add_argument("--rank-timeout", type=float, default=30.0, metavar="S",
                        help="with --hosts: end a turn, cut short, when the ranks say nothing "
                             "for S seconds (default 30)")
    parser.add_argument("--pin", action="append", default=[], metavar="FILE",
                        help="pin FILE after the system prompt of the session it opens "
                             "(repeatable); its KV is shared with other sessions pinning it")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ask = sub.add_parser("ask", help="answer one prompt, streaming to stdout",
                         description="Answer PROMPT ('-' reads stdin) and stream the reply.")
    ask.add_argument("prompt", help="the question; '-' reads it from stdin")
    _add_generation_args(ask)
    ask.add_argument("--session", "-s",
                     help="continue the session with this id or exact title across runs "
                          "(created when there is none)")
    ask.add_argument("--new", action="store_true",
                     help="start a new session titled by --session even if one has that title")
    ask.add_argument("--json", action="store_true", help="print one JSON object with the stats")
    ask.add_argument("--schema", metavar="FILE.json",
                     help="the reply is JSON that follows this JSON schema (each token "
                          "masked to what the schema allows)")
    ask.add_argument("--docs", metavar="NAME",
                     help="retrieve from this document collection for the question (its "
                          "sources go to stderr, and into --json); 'off' for none")
    ask.add_argument("--hosts", metavar="HOSTFILE",
                     help="split the model over the hosts of this mlx.launch hostfile")
    ask.add_argument("--rank-timeout", type=float, default=30.0, metavar="S",
                     help="with --hosts: end the turn, cut short, when the ranks say nothing "
                          "for S seconds (default 30)")
    ask.add_argument("--tools", metavar="SERVER[,...]",
                     help="let the model call the tools of these MCP servers ('*': all; "
                          "SERVER.TOOL for one); each call asks on the terminal")
    ask.add_argument("--tool-prompt", choices=("template", "generic"),
                     help="generic: describe the tools in the system prompt when the "
                          "model's chat template has no place for them (default: template)")
    ask.add_argument("--allow-tools", metavar="TOOL[,...]", default="",
                     help="these tools (TOOL or SERVER.TOOL) run without asking; with no "
                          "terminal, any other call is refused")

    models = sub.add_parser("models", help="list catalog and local models",
                            description="List catalog and local models and whether they work "
                            "offline.")
    models.add_argument("--json", action="store_true")
    models.add_argument("--scan", action="store_true",
                        help="list the GGUFs in Ollama's and LM Studio's folders")

    imp = sub.add_parser("import", help="import a GGUF file or an Ollama model",
                         description="Convert a GGUF (llama, qwen2/3, gemma2/3; legacy and "
                         "K-quants) once, keeping its quantization.")
    imp.add_argument("path", nargs="?", help="the .gguf file, or ollama:NAME[:TAG]")
    imp.add_argument("--name", help="register it under this alias")
    imp.add_argument("--bundled", action="store_true", help="import the bundled default model")
    imp.add_argument("--hosts", metavar="HOSTFILE",
                     help="import on every host of this mlx.launch hostfile too (over ssh; "
                          "each needs the file at the same path), for a split model")

    conv = sub.add_parser("convert", help="quantize a dense HF checkpoint with mlx-lm",
                          description="Quantize a Hugging Face checkpoint (folder or repo).")
    conv.add_argument("source", help="HF folder or repo id")
    conv.add_argument("--bits", type=int, default=4, help="weight bits (default 4)")
    conv.add_argument("--out", help="output folder (default: the models cache)")

    from mlxchat.cli.docs import add_docs_parser
    from mlxchat.cli.serve import add_serve_parser
    from mlxchat.cli.sessions import add_sessions_parser
    from mlxchat.cli.tools import add_tools_parser

    add_sessions_parser(sub)
    add_docs_parser(sub)
    add_tools_parser(sub)
    add_serve_parser(sub)
    from mlxchat.cli.host_check import add_hosts_parser

    add_hosts_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except BrokenPipeError:  # `mlxchat --help | head -1`
        return _stdout_closed()
    logging.basicConfig(level=os.environ.get("MLXCHAT_LOG", "WARNING").upper(),
                        format="%(levelname)s %(name)s: %(message)s")
    if os.environ.get("MLXCHAT_LAUNCH_FILES"):  # run on a host by a launch script
        import atexit

        from mlxchat.cli.ranks import remove_own_launch_files

        atexit.register(remove_own_launch_files)
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # a broken pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - everything the user can cause is one line
        text = user_message(exc)
        if text is None:
            raise
        print(f"mlxchat: error: {text}", file=sys.stderr)
        return getattr(exc, "exit_status", 1)


def _stdout_closed() -> int:
    """The reader of our output went away (`mlxchat sessions list | head -3`): stop
    quietly with 128 + SIGPIPE, as Unix tools do. Later writes (the final flush at
    exit) go to /dev/null instead of printing a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141


def _dispatch(args: argparse.Namespace) -> int:
    from mlxchat.config import load_settings

    settings = load_settings()
    if args.command is None and args.context is not None:
        gen = replace(settings.generation, context_window=args.context)
        try:
            gen.check()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        settings.generation = gen
    if args.command == "ask":
        from mlxchat.cli.ask import run_ask

        return run_ask(args, settings)
    if args.command == "models":
        return _models(args)
    if args.command == "import":
        return _import(args)
    if args.command == "convert":
        from mlxchat.models import convert_checkpoint

        out = convert_checkpoint(args.source, args.out and os.path.expanduser(args.out),
                                 bits=args.bits, progress=progress_printer())
        print(out)
        return 0
    if args.command == "serve":
        from mlxchat.cli.serve import run_serve

        return run_serve(args, settings, need_terminal=_need_terminal)
    if args.command == "sessions":
        from mlxchat.cli.sessions import run_sessions

        return run_sessions(args)
    if args.command == "hosts":
        from mlxchat.cli.host_check import run_hosts

        return run_hosts(args, settings.model)
    if args.command == "docs":
        from mlxchat.cli.docs import run_docs

        return run_docs(args)
    if args.command == "tools":
        from mlxchat.cli.tools import run_tools

        return run_tools(args)
    for name in args.pin:
        if not os.path.isfile(name):
            raise UsageError(f"--pin {name}: no such file")
    _need_terminal()
    blas.warn_once()  # before the screen is taken: why MLX is slow here, once
    native.warn_once()
    from functools import partial

    from mlxchat.cli.split import factories, split_launch
    from mlxchat.session.root import default_tool_host, open_conversation
    from mlxchat.tui.app import run_app
    from mlxchat.tui.pictures import probe

    probe(settings.images)  # before Textual reads stdin: what the terminal draws
    host = default_tool_host()  # the MCP servers: started when a session uses them
    try:
        with split_launch(args.hosts, rank_timeout_s=args.rank_timeout) as split:
            factory = partial(open_conversation, tool_host=host, **factories(split))
            return run_app(settings, model=args.model, continue_last=args.continue_last,
                           session=args.session, pins=args.pin, conversation_factory=factory)
    finally:
        host.close()  # after the app's conversation is shut down; bounded


def _need_terminal() -> None:
    """The chat UI needs a terminal on both ends; without one Textual would spin."""
    missing = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout))
               if stream is None or not stream.isatty()]
    if missing:
        verb = "are not terminals" if len(missing) > 1 else "is not a terminal"
        raise UserError(f"the chat UI needs a terminal ({' and '.join(missing)} {verb}); "
                        "for one answer without it use: mlxchat ask 'your question'")


def _import(args: argparse.Namespace) -> int:
    from mlxchat.models import bundled_gguf, import_gguf
    from mlxchat.models.report import import_report

    if not args.bundled and not args.path:
        raise UsageError("give a .gguf file to import, or --bundled")
    path = bundled_gguf() if args.bundled else args.path
    made: list[Path] = []

    def here() -> str:
        made.append(import_gguf(path, args.name, progress=progress_printer()))
        return f"imported {path} -> {made[0]}" + (f" as '{args.name}'" if args.name else "")
    if args.hosts:
        from mlxchat.cli.import_hosts import import_on_hosts

        # Every host reads the same path: an absolute one (an ollama: name as it is).
        where = str(path) if args.bundled or str(path).startswith("ollama:") else \
            str(Path(path).expanduser().resolve())
        argv = ["--bundled"] if args.bundled else [where]
        argv += ["--name", args.name] if args.name else []
        reports = import_on_hosts(args.hosts, argv, here)
        for report in reports:
            print(report.line())
        return 0 if all(r.ok for r in reports) else 1
    print(here())
    print(import_report(made[0]))
    return 0


def _models(args: argparse.Namespace) -> int:
    import json
    import shutil

    from mlxchat.cli.models_table import models_table
    from mlxchat.models import list_models

    if args.scan:
        from mlxchat.models.report import scan_table

        print(scan_table(as_json=args.json))
        return 0
    entries = list_models()
    if args.json:
        print(json.dumps([e.__dict__ for e in entries], indent=2))
        return 0
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(models_table(entries, width))
    return 0
