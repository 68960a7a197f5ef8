"""`mlxchat ask`: one prompt, the reply streamed to stdout, optional JSON stats."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import replace

from mlxchat.chat import GenerationSettings, Message, TurnStats
from mlxchat.cli import progress_printer
from mlxchat.errors import UserError
from mlxchat.config import Settings
from mlxchat.engine import ChatEngine, TextDelta, TurnDone

_FLAGS = {"max_tokens": "max_tokens", "temp": "temperature", "top_p": "top_p",
          "min_p": "min_p", "seed": "seed", "repetition_penalty": "repetition_penalty",
          "kv_bits": "kv_bits", "context_policy": "context_policy"}


def _settings_from(args: argparse.Namespace, base: GenerationSettings) -> GenerationSettings:
    given = {field: getattr(args, flag) for flag, field in _FLAGS.items()
             if getattr(args, flag) is not None}
    gen = replace(base, **given)
    try:
        gen.check()
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return gen


def _read_prompt(arg: str) -> str:
    text = sys.stdin.read() if arg == "-" else arg
    if not text.strip():
        raise UserError("the prompt is empty")
    return text


def _stream(events, *, quiet: bool) -> TurnDone:
    """Print text deltas as they come; Ctrl-C stops generation, keeping the partial reply."""
    done = None
    for event in events:
        if isinstance(event, TextDelta) and not quiet:
            sys.stdout.write(event.text)
            sys.stdout.flush()
        elif isinstance(event, TurnDone):
            done = event
    if not quiet:
        sys.stdout.write("\n")
    assert done is not None
    return done


def report(stats: TurnStats, reply: str, model: str, extra: dict | None = None) -> dict:
    keys = ("prompt_tokens", "generated_tokens", "ttft_s", "prefill_tps", "decode_tps",
            "kv_bytes", "kv_bits", "context_used", "context_window", "weights_bytes",
            "peak_memory_bytes", "finish_reason", "reused_tokens", "prefilled_tokens",
            "cache_source", "miss_reason", "dropped_messages", "snapshot_warning")
    data = {"reply": reply, "model": model}
    data.update({k: getattr(stats, k) for k in keys})
    data.update(extra or {})
    return data


def run_ask(args: argparse.Namespace, settings: Settings) -> int:
    from mlxchat.models import load_model

    text = _read_prompt(args.prompt)
    store = session = None
    if args.session:
        from mlxchat.store import StoreError, open_store

        store = open_store()
        try:
            session = store.find_session(args.session)
        except StoreError:
            session = None
    spec = args.model or (session.model if session else None) or settings.model
    loaded = load_model(spec, progress=progress_printer())
    engine = ChatEngine(loaded)
    previous = signal.signal(signal.SIGINT, lambda *_: engine.cancel())
    try:
        if store is None:
            gen = _settings_from(args, settings.generation)
            system = args.system if args.system is not None else settings.system_prompt
            msgs = ([Message("system", system)] if system else []) + [Message("user", text)]
            done = _stream(engine.turn(msgs, gen), quiet=args.json)
            extra: dict = {}
        else:
            done, extra = _ask_in_session(args, settings, store, session, engine, spec, text)
    finally:
        signal.signal(signal.SIGINT, previous)
        engine.close()
    if args.json:
        print(json.dumps(report(done.stats, done.reply, loaded.info.name, extra)))
    return 130 if done.stats.finish_reason == "cancelled" else 0


def _ask_in_session(args, settings, store, session, engine, spec, text
                    ) -> tuple[TurnDone, dict]:
    from mlxchat.conversation import Conversation

    if session is None:
        gen = _settings_from(args, settings.generation)
        session = store.create_session(spec, args.system or settings.system_prompt, gen,
                                       title=args.session)
    conv = Conversation(settings=settings, store=store, engine=engine, model_spec=spec,
                        session=session)
    if session.model != spec:
        conv.session = store.update_model(session.id, spec)
    if args.system is not None and args.system != conv.session.system_prompt:
        conv.set_system_prompt(args.system)
    # Flags apply to this call; the session keeps its stored settings.
    conv.session.settings = _settings_from(args, conv.session.settings)
    snap = conv.restore_snapshot()
    done = _stream(conv.send(text), quiet=args.json)
    extra = {"session": {"id": conv.session.id, "title": conv.session.title},
             "snapshot": None if snap is None else {"ok": snap.ok, "reason": snap.reason}}
    return done, extra
