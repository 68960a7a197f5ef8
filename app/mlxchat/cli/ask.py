"""`mlxchat ask`: one prompt, the reply streamed to stdout, optional JSON stats."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxchat.cli.progress import progress_printer
from mlxchat.cli.tool_consent import TerminalConsent
from mlxchat.config import Settings
from mlxchat.engine.events import TextDelta, TurnDone
from mlxchat.errors import UsageError
from mlxchat.generation import GenerationSettings
from mlxchat.sources import best_score, left_out_words
from mlxchat.turn_stats import TurnStats

if TYPE_CHECKING:
    from mlxchat.session.conversation import Conversation
    from mlxchat.session.retrieval import Retrieved

SESSION_WAIT_S = 10.0
"""How long `ask --session` waits for another mlxchat to let go of the session."""
CUT_SHORT_EXIT = 3
"""The exit status when the engine cut the reply short (a rank of a split model
was lost): not ctrl-c's 130, so a script can tell the two apart."""
BAD_TOOLS_EXIT = 2
"""The exit status when --tools names servers that are not configured (a usage error)."""

_FLAGS = {"max_tokens": "max_tokens", "temp": "temperature", "top_p": "top_p",
          "min_p": "min_p", "seed": "seed", "repetition_penalty": "repetition_penalty",
          "kv_bits": "kv_bits", "context_policy": "context_policy",
          "max_reasoning_tokens": "max_reasoning_tokens", "reasoning_effort": "reasoning_effort",
          "context": "context_window", "cpu_matmul": "cpu_matmul", "tool_prompt": "tool_prompt"}


def _settings_from(args: argparse.Namespace, base: GenerationSettings) -> GenerationSettings:
    given = {field: getattr(args, flag) for flag, field in _FLAGS.items()
             if getattr(args, flag) is not None}
    if args.think is not None:
        given["thinking"] = args.think == "on"
    gen = replace(base, **given)
    try:
        gen.check()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return gen


def _check_template(info, args: argparse.Namespace) -> None:
    """--think and --reasoning-effort only for templates that read them."""
    for flag, variable in (("think", "enable_thinking"), ("reasoning_effort", "reasoning_effort")):
        if getattr(args, flag) is not None and variable not in info.template_variables:
            raise UsageError(f"{info.name}'s chat template does not take {variable}; "
                            f"--{flag.replace('_', '-')} would change nothing")
    if args.kv_bits and info.head_dim and info.head_dim % 32:
        raise UsageError(f"--kv-bits needs a head size that is a multiple of 32; "
                        f"{info.name}'s is {info.head_dim}, so its KV cache cannot be quantized")
    if args.context is not None:
        check_context(info, args.context)


def check_context(info, context: int) -> None:
    """``--context`` (of ``ask`` and ``serve``) lowers the model's window, never raises it."""
    if context > info.context_window:
        raise UsageError(f"--context can only lower {info.name}'s window of "
                        f"{info.context_window:,} tokens; got {context:,}")


def _check_docs(name: str | None) -> None:
    """--docs names a collection of the app's database: said before any load
    when it is malformed or not there (a usage error, as --tools is)."""
    if name in (None, "off"):
        return
    from mlxchat.docs import DocsError
    from mlxchat.docs.indexer import check_name
    from mlxchat.session.root import default_store
    from mlxchat.store.documents import CollectionNotFound

    try:
        check_name(name)
    except DocsError as exc:
        raise UsageError(str(exc)) from None
    store = default_store()
    try:
        store.documents.get(name)
    except CollectionNotFound as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()


def _speculate(conv, args: argparse.Namespace) -> None:
    """--draft loads a draft model, --speculative picks the mode; refused with the reason."""
    if args.draft is not None:
        conv.speculation.set_draft(None if args.draft == "off" else
                       conv.speculation.paired_draft() if args.draft == "auto" else args.draft)
    if args.speculative is not None:
        conv.speculation.set_speculative(args.speculative)


def _tools_choice(args: argparse.Namespace) -> str | None:
    """--tools as the session's ``tools`` setting, checked before any load."""
    from mlxchat.generation import generation_problem

    if args.tools is None:
        if args.allow_tools:
            raise UsageError("--allow-tools needs --tools SERVER[,...]")
        if getattr(args, "tool_prompt", None):
            raise UsageError("--tool-prompt needs --tools SERVER[,...]")
        return None
    choice = ",".join(s.strip() for s in args.tools.split(",") if s.strip())
    if not choice or generation_problem("tools", choice):
        raise UsageError(f"--tools takes SERVER, SERVER.TOOL or '*', comma-separated; "
                        f"got {args.tools!r}")
    return choice


def _tools_problem(choice: str | None) -> str | None:
    """Why --tools cannot be used (mcp.json unreadable or without servers, a
    server it names not there), or None."""
    if not choice:
        return None
    from mlxchat.tools.catalog import choice_problem
    from mlxchat.tools.config import load_tools_config

    config = load_tools_config()
    return config.unusable() or choice_problem(choice, config.names)


def _tool_steps(conv, done: TurnDone, consent, *, quiet: bool) -> tuple[TurnDone, list]:
    """Run the reply's tool calls, then the turns that read their results,
    until a reply calls none (each result said on stderr, one line)."""
    steps: list[dict] = []
    while (step := conv.tool_loop.step(done, consent=consent)) is not None:
        for result in step.results:
            run = result.tool_run
            steps.append(run.to_dict())
            print(f"[tool {run.header()}]", file=sys.stderr)
        if step.notice:
            print(f"mlxchat: {step.notice}", file=sys.stderr)
        if step.turn is None:
            break
        done = _stream(step.turn, quiet=quiet)
    return done, steps


def _read_schema(path: str | None) -> dict | None:
    """The ``--schema`` file's JSON schema (None without the flag); one line
    and exit status 2 when it is missing or not a JSON object."""
    if path is None:
        return None
    try:
        schema = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--schema {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"--schema {path}: not JSON ({' '.join(str(exc).split())})") from None
    if not isinstance(schema, dict):
        raise UsageError(f"--schema {path}: a JSON schema is an object, not "
                         f"{type(schema).__name__}")
    return schema


def _constrain(conv, path: str, schema: dict) -> None:
    """The next reply follows ``schema``, compiled for the model (exit 2 when it cannot)."""
    from mlxchat.engine.turn.constrained import OutputFormat, SchemaError
    try:
        conv.turns.follow_schema(OutputFormat(schema, Path(path).stem))
    except SchemaError as exc:
        raise UsageError(f"--schema {path}: {exc}") from None


def _read_prompt(arg: str) -> str:
    text = sys.stdin.read() if arg == "-" else arg
    if not text.strip():
        raise UsageError("the prompt is empty")
    return text


def _stream(events, *, quiet: bool) -> TurnDone:
    """Print text deltas as they come: the answer to stdout, reasoning to stderr
    (a pipe gets the answer alone). Ctrl-C stops generation, keeping the partial reply."""
    done = None
    for event in events:
        if isinstance(event, TextDelta) and not quiet:
            out = sys.stderr if event.part == "reasoning" else sys.stdout
            out.write(event.text)
            out.flush()
        elif isinstance(event, TurnDone):
            done = event
    if not quiet:
        sys.stdout.write("\n")
    assert done is not None
    return done


def _sources(found: Retrieved | None, *, quiet: bool) -> list[dict] | None:
    """What the message retrieved: said on stderr before the reply starts
    (unless ``quiet``), returned for --json."""
    if found is None:
        return None
    if not quiet:
        lines = [f"sources from {found.collection}: {len(found.sources)} chunks, "
                 f"{found.tokens:,} of {found.budget:,} budget tokens"
                 + (f"; {left_out_words(found.left_out)}" if found.left_out else "")]
        best = best_score(found.sources)
        lines += [f"  {s.describe(best=best)}" for s in found.sources]
        print("\n".join(lines), file=sys.stderr)
    return [{**s.to_dict(), "place": s.place} for s in found.sources]


def _recalled(conv: Conversation, *, quiet: bool) -> list[dict]:
    """What the message recalled of the conversation: said on stderr (unless
    ``quiet``), returned for --json (each passage's text, message and tokens)."""
    found = conv.recall.last
    if found and not quiet:
        best = best_score(found)
        print("\n".join([f"recalled from earlier in this conversation: {len(found)} passages, "
                         f"{sum(s.tokens for s in found):,} tokens"]
                        + [f"  {s.describe(best=best)}" for s in found]), file=sys.stderr)
    return conv.recall.report()


def report(stats: TurnStats, reply: str, model: str, extra: dict | None = None) -> dict:
    keys = ("prompt_tokens", "generated_tokens", "ttft_s", "prefill_tps", "decode_tps",
            "kv_bytes", "kv_bits", "context_used", "context_window", "weights_bytes",
            "peak_memory_bytes", "finish_reason", "reused_tokens", "prefilled_tokens",
            "cache_source", "miss_reason", "dropped_messages", "snapshot_warning", "save_warning",
            "reasoning_tokens", "reasoning_s", "reasoning_budget_closed", "spec_mode", "draft_tokens_proposed",
            "draft_tokens_accepted", "target_passes", "engine_warning", "blas", "cpu_matmul",
            "spec_off_reason", "compaction")
    data = {"reply": reply, "model": model}
    data.update({k: getattr(stats, k) for k in keys})
    data["ttft_s"] = stats.first_token_s  # null: no token came, nothing measured
    data.update(extra or {})
    return data


def run_ask(args: argparse.Namespace, settings: Settings) -> int:
    """One prompt through ``conv.turns.send``: in the named session (created
    when missing or with ``--new``), else in a throwaway in-memory session."""
    from mlxchat.cli.split import split_launch

    text = _read_prompt(args.prompt)
    args.schema_read = _read_schema(getattr(args, "schema", None))  # before any load
    if args.new and args.session is None:
        raise UsageError("--new needs --session NAME (the title of the new session)")
    _settings_from(args, settings.generation)  # a flag out of range: said before any load
    _check_docs(args.docs)
    problem = _tools_problem(_tools_choice(args))
    if problem:  # the line /tools on says, before any model loads
        print(f"mlxchat: error: {problem}", file=sys.stderr)
        return BAD_TOOLS_EXIT
    with split_launch(getattr(args, "hosts", None),
                      rank_timeout_s=getattr(args, "rank_timeout", 30.0)) as split:
        return _ask(args, settings, text, split)


def _configure(conv, args: argparse.Namespace, *, choice: str | None, docs_store: Any,
               grants_store: Any) -> None:
    """The flags on the conversation: this call's settings (the session's own
    for a new one), its system prompt, collection, tools and speculation."""
    if docs_store is not None:
        conv.retrieval.collections_from(docs_store)
    if args.system is not None and args.system != conv.session.system_prompt:
        conv.set_system_prompt(args.system)
    gen = _settings_from(args, conv.generation)
    _check_template(conv.views.model_info, args)
    if args.docs is not None:  # checked before anything is sent
        gen = replace(gen, docs=None if args.docs == "off" else
                      conv.retrieval.collection(args.docs).name)
    if choice:
        gen = replace(gen, tools=choice)
        conv.tools.switch_hint = "--tool-prompt generic"
        if grants_store is not None:  # 'always' answers are the app's
            conv.tools.grants_from(grants_store)
    if conv.messages:
        conv.use_settings(gen)  # flags apply to this call; the session keeps its own
    else:
        conv.update_generation(gen)
    _speculate(conv, args)


def _ask(args: argparse.Namespace, settings: Settings, text: str, split: Any) -> int:
    from mlxchat.cli.split import factories
    from mlxchat.session.root import (
        default_store,
        default_tool_host,
        open_conversation,
        throwaway_store,
    )

    named = args.session is not None
    choice = _tools_choice(args)
    host = default_tool_host() if choice else None
    try:
        opened = open_conversation(
            settings, model_spec=args.model, session=None if args.new else args.session,
            lookup="exact", new_title=args.session, progress=progress_printer(),
            store_factory=default_store if named else throwaway_store, keep_snapshots=named,
            lock_wait_s=SESSION_WAIT_S, tool_host=host, **factories(split))
    except BaseException:
        if host is not None:
            host.close()
        raise
    conv = opened.conversation
    conv.compactor.ahead = False  # no idle time: a message that overflows waits for it
    # A one-off question's session is in memory; its collections are the app's.
    wanted = args.docs if args.docs is not None else conv.generation.docs
    docs_store = default_store() if wanted not in (None, "off") and not named else None
    grants_store = default_store() if choice and not named else None
    previous = signal.signal(signal.SIGINT, lambda *_: conv.turns.cancel())
    try:
        _configure(conv, args, choice=choice, docs_store=docs_store, grants_store=grants_store)
        for line in conv.tools.ready():
            print(f"mlxchat: {line}", file=sys.stderr)
        if args.schema_read is not None:
            _constrain(conv, args.schema, args.schema_read)
        events = conv.turns.send(text)  # retrieves and commits; the prefill starts in _stream
        extra: dict = {"sources": _sources(conv.retrieval.last, quiet=args.json),
                       "recalled": _recalled(conv, quiet=args.json)}
        done = _stream(events, quiet=args.json)
        if choice:
            consent = TerminalConsent(args.allow_tools.split(","),
                                      session_grants=conv.tools.session_grants)
            done, extra["tool_steps"] = _tool_steps(conv, done, consent, quiet=args.json)
        if named:
            snap = conv.cache.last_load
            extra.update(session={"id": conv.session.id, "title": conv.session.title},
                         snapshot=None if snap is None else {"ok": snap.ok,
                                                             "reason": snap.reason})
        extra.setdefault("session", None)  # a one-off question is not kept
        name = conv.views.model_info.name
        if split is not None:
            state = conv.views.state()
            extra["layout"] = state.layout
            extra["ranks"] = [asdict(r) for r in state.ranks]
    finally:
        signal.signal(signal.SIGINT, previous)
        conv.shutdown()  # a session a refused prompt left empty is removed
        if host is not None:
            host.close()
        for store in (docs_store, grants_store):
            if store is not None:
                store.close()
    if args.json:
        print(json.dumps(report(done.stats, done.reply, name,
                                {"reasoning": done.reasoning or None, **extra})))
    if done.stats.engine_warning:  # a lost rank: said here, not only in the app
        print(f"mlxchat: {done.stats.engine_warning}", file=sys.stderr)
        return CUT_SHORT_EXIT
    return 130 if done.stats.finish_reason == "cancelled" else 0

