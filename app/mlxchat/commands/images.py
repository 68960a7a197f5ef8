"""/image: an image for the next message, shown before it is sent with its
size, the tokens it takes in the window and the time to prefill them; and a
path dropped into the prompt (a terminal pastes the file's path) recognised
as one."""

from __future__ import annotations

import shlex
from pathlib import Path

from mlxchat.chat import human_bytes
from mlxchat.commands.base import (
    Args,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    Confirmation,
    pending_list,
    prefill_words,
)
from mlxchat.commands.completers import complete_files, user_path
from mlxchat.errors import MlxchatError
from mlxchat.units import fmt_int, fmt_report_percent

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff")


def dropped_image(ctx: CommandContext, text: str) -> Path | None:
    """The image file a line names when it is only a path (as a terminal
    pastes a dropped file: maybe quoted, spaces escaped), else None."""
    line = text.strip()
    if not line or "\n" in line or len(line) > 4096:
        return None
    try:
        words = shlex.split(line)
    except ValueError:
        return None
    if len(words) != 1 or not words[0].lower().endswith(IMAGE_SUFFIXES):
        return None
    try:
        path = user_path(ctx, words[0])
    except CommandError:
        return None
    return path if path.is_file() else None


def image(ctx: CommandContext, args: Args) -> CommandResult:
    conv = ctx.conversation
    pending = conv.turns.images
    listed = pending_list(pending, args, "image", "/image PATH",
                          lambda r: f"{r.name} ({r.width}x{r.height})")
    if listed is not None:
        if "--clear" in args.flags:
            conv.turns.encode_images()  # their features are dropped too
        return listed
    if "--dropped" in args.flags:
        found = user_path(ctx, args.words[0])
        if not found.is_file():
            raise CommandError(f"{found} is not a file.")
        question = f"Show {found.name} to the model with your next message?"
        def accept() -> CommandResult:
            return image(ctx, Args((str(found),), frozenset()))
        return CommandResult("confirm", question, confirm=Confirmation(
            question, accept, yes="Attach", destructive=False))
    path = user_path(ctx, args.words[0])
    window = conv.views.context_window
    try:
        ref, tokens = conv.turns.add_image(path, room=conv.views.window_left())
    except MlxchatError as exc:
        raise CommandError(exc.user_text()) from None
    prefill = prefill_words(ctx, tokens)
    return CommandResult.info(
        f"Image {ref.name}: {ref.width}x{ref.height}, {human_bytes(path.stat().st_size)} · "
        f"{fmt_int(tokens)} tokens ({fmt_report_percent(tokens, window)} of the "
        f"{fmt_int(window)}-token window) · {prefill}. It goes with your next message "
        "(/image --clear drops it).", clear_input=True, image=ref)


COMMANDS = (
    Command("image", image, "Show an image to the model with the next message",
            usage="/image PATH | --clear", text=True, unquote=True, max_args=1,
            flags=("--clear", "--dropped"), complete=complete_files, while_busy=True,
            details="Shows the image's size, the tokens it takes in the window and its "
                    "prefill time before you send. A model that sees no images refuses it; "
                    "so do files that are not images, damaged, animated or too large. A "
                    "path dropped into the prompt is taken as /image PATH."),
)
