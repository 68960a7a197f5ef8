"""A conversation longer than the window: /compact, /compact undo and /recall."""

from __future__ import annotations

from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
)
from mlxchat.units import fmt_int, plural


def compact(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    if args.words and args.words[0] != "undo":
        raise CommandError("Usage: /compact [undo]")
    if args.words:
        record, later = conv.compactor.undo()
        since = (f" The {plural(later, 'message')} sent since stay on the compacted branch "
                 "(/branch)." if later else "")
        return CommandResult.info(
            f"Compaction undone: the {plural(record.summarized, 'message')} it summarized are "
            f"back in the model's view as they were ({fmt_int(record.tokens_before)} tokens; "
            f"their KV cache came back from disk).{since}", session_changed=True)
    switched = conv.compactor.compact()
    record = switched.compaction
    return CommandResult.info(
        f"Compacted: {record.headline()}; the window holds {fmt_int(record.tokens_after)} "
        f"tokens instead of {fmt_int(record.tokens_before)}. The messages stay in the "
        "session (export and /sessions show them); /compact undo goes back.",
        session_changed=True)


def _complete(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    if words:
        return []
    return [("undo", "back to the conversation as it was before the last compaction")]


def recall(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    if args.words:
        word = args.words[0].lower()
        if word not in ("on", "off"):
            raise CommandError("Usage: /recall [on|off]")
        conv.change_generation(recall=word == "on")
    on = conv.generation.recall
    gone = len(conv.recall.gone())
    state = ("on: each message brings back the passages of earlier messages that match it"
             if on else "off: nothing is brought back")
    last = conv.recall.last
    said = (f" The last message recalled {plural(len(last), 'passage')} "
            f"({fmt_int(sum(s.tokens for s in last))} tokens)." if on and last else "")
    return CommandResult.info(f"Recall is {state}; {plural(gone, 'message')} of this branch "
                              f"{'is' if gone == 1 else 'are'} no longer in the model's view."
                              + said)


COMMANDS = (
    Command("compact", compact, "Summarize the oldest messages to make room in the window, "
            "or undo that", usage="/compact [undo]", max_args=1, complete=_complete,
            details="The summary is written by the loaded model from a fixed prompt and "
                    "stands in front of the newest messages, which stay whole; the system "
                    "prompt and pinned documents are never summarized. Every message stays "
                    "in the session. With context_policy compact this happens by itself "
                    "when the window fills, prepared ahead of time (/set compact_at)."),
    Command("recall", recall, "Bring back earlier messages that left the window when a new "
            "one matches them, or stop", usage="/recall [on|off]", max_args=1,
            details="Messages a compaction summarized or drop_oldest left out are indexed "
                    "like documents (BM25 and embeddings); each message gets the few "
                    "passages that match it closely, shown as its sources with their tokens. "
                    "Nothing comes back when nothing matches."),
)
