"""The command registry: parse a slash line, run it safely, complete it, describe it."""

from __future__ import annotations

import difflib
import logging
import re
import shlex
from collections.abc import Iterable

from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    Completion,
    one_line,
)
from mlxchat.commands.help_topics import Section, grouped, help_markdown
from mlxchat.errors import user_message

log = logging.getLogger(__name__)

MAX_COMPLETIONS = 50
_LINE = re.compile(r"\s*/(\S*)(\s*)(.*)", re.DOTALL)


def _lenient_split(text: str) -> list[str]:
    """shlex words of a partly typed line; the last one is the word being typed
    ('' after a space). An open quote is closed for the split."""
    for closing in ("", '"', "'"):
        try:
            words = shlex.split(text + closing)
        except ValueError:
            continue
        if not words or (not closing and (not text or text[-1].isspace())):
            words.append("")
        return words
    return text.split() + [""]


def _quote(word: str) -> str:
    """Quoted for the input line; a folder keeps its trailing '/' outside the quotes."""
    if len(word) > 1 and word.endswith("/"):
        return shlex.quote(word[:-1]) + "/"
    return shlex.quote(word) if word else word


class Registry:
    """Commands by name and alias. ``run`` and ``complete`` never raise."""

    def __init__(self, commands: Iterable[Command] = (), *, with_help: bool = True):
        self._commands: dict[str, Command] = {}
        self._names: dict[str, Command] = {}
        if with_help:
            self.add(Command("help", self._help, "List the commands, or explain one",
                             usage="/help [COMMAND]", aliases=("?",), max_args=1,
                             complete=self._complete_names, while_busy=True))
        for command in commands:
            self.add(command)

    def add(self, command: Command) -> None:
        for key in (command.name, *command.aliases):
            if key.casefold() in self._names:
                raise ValueError(f"command name /{key} is taken")
        self._commands[command.name] = command
        for key in (command.name, *command.aliases):
            self._names[key.casefold()] = command

    @property
    def commands(self) -> list[Command]:
        return sorted(self._commands.values(), key=lambda c: c.name)

    def get(self, name: str) -> Command | None:
        return self._names.get(name.casefold().lstrip("/"))

    @staticmethod
    def is_command(line: str) -> bool:
        """A line the UI should run as a command ('//text' sends '/text' as a message)."""
        stripped = line.lstrip()
        return stripped.startswith("/") and not stripped.startswith("//")

    def help_sections(self) -> list[Section]:
        """The commands by topic, each (usage, help), for a help screen."""
        return grouped(self.commands)

    def help_rows(self) -> list[tuple[str, str]]:
        """(usage, help) per command, topic by topic."""
        return [row for _, rows in self.help_sections() for row in rows]

    # -- parsing ------------------------------------------------------------
    def _unknown(self, name: str) -> CommandError:
        shown = one_line(name, 40)
        close = difflib.get_close_matches(name.casefold(), list(self._names), n=1, cutoff=0.6)
        if close:
            return CommandError(f"Unknown command /{shown}. "
                                f"Did you mean /{self._names[close[0]].name}?")
        return CommandError(f"Unknown command /{shown}. /help lists the commands.")

    def parse(self, line: str) -> tuple[Command, Args]:
        """The command and its arguments; CommandError (one line) on bad input."""
        match = _LINE.match(line)
        if match is None:
            raise CommandError("Commands start with '/'; /help lists them.")
        name, rest = match.group(1), match.group(3)
        if not name:
            raise CommandError("Type a command name after '/'; /help lists them.")
        command = self.get(name)
        if command is None:
            raise self._unknown(name)
        args = self._parse_text(command, rest) if command.text else self._parse_words(command, rest)
        n = len(args.words)
        if n < command.min_args or (command.max_args is not None and n > command.max_args):
            raise CommandError(f"Usage: {command.usage_line}")
        return command, args

    @staticmethod
    def _parse_text(command: Command, rest: str) -> Args:
        text = rest.strip()
        flags: set[str] = set()
        head, _, tail = text.partition(" ")
        if head in command.flags:
            flags.add(head)
            text = tail.strip()
        if command.unquote and text[:1] in ("'", '"'):
            try:
                words = shlex.split(text)
            except ValueError:
                words = []
            if len(words) == 1:
                text = words[0]
        return Args((text,) if text else (), frozenset(flags))

    @staticmethod
    def _parse_words(command: Command, rest: str) -> Args:
        try:
            tokens = shlex.split(rest, comments=False, posix=True)
        except ValueError as exc:
            raise CommandError(f"Cannot read the arguments of /{command.name} "
                               f"({exc}). Usage: {command.usage_line}") from None
        words, flags = [], set()
        for token in tokens:
            if token.startswith("--") and len(token) > 2:
                if token not in command.flags:
                    raise CommandError(f"Unknown option {one_line(token, 40)} for "
                                       f"/{command.name}. Usage: {command.usage_line}")
                flags.add(token)
            else:
                words.append(token)
        return Args(tuple(words), frozenset(flags))

    # -- running ------------------------------------------------------------
    def run(self, line: str, ctx: CommandContext) -> CommandResult:
        """Run one slash line. Any failure comes back as a one-line error result
        (the traceback goes to the log); a ``confirm`` is accepted at once when
        ``ctx.assume_yes``. May block (a model load): call it off the UI thread."""
        name = "?"
        try:
            command, args = self.parse(line)
            name = command.name
            if not command.while_busy and ctx.conversation.views.state().busy:
                raise CommandError(f"A reply is being generated; wait for it or cancel it "
                                   f"before /{name}.")
            result = command.handler(ctx, args)
            if not isinstance(result, CommandResult):
                raise TypeError(f"/{name} returned {type(result).__name__}, not a result")
            if result.confirm is not None:
                result.confirm.accept = self._guard(result.confirm.accept, name)
                if ctx.assume_yes:
                    result = result.confirm.accept()
            return result
        except Exception as exc:  # noqa: BLE001 - the UI must always get a result
            return self._failure(exc, name)

    def _guard(self, action, name: str):
        def guarded() -> CommandResult:
            try:
                result = action()
                if not isinstance(result, CommandResult):
                    raise TypeError(f"/{name} returned {type(result).__name__}, not a result")
                return result
            except Exception as exc:  # noqa: BLE001
                return self._failure(exc, name)
        return guarded

    @staticmethod
    def _failure(exc: Exception, name: str) -> CommandResult:
        text = user_message(exc)
        if text is not None:
            log.debug("/%s refused: %s", name, exc, exc_info=exc)
            return CommandResult.error(text, more=getattr(exc, "more", ""))
        log.error("/%s failed", name, exc_info=exc)
        return CommandResult.error(f"/{name} failed: {type(exc).__name__}: {exc}. "
                                   "Details are in the log.")

    # -- completion -----------------------------------------------------------
    def complete(self, text: str, ctx: CommandContext) -> list[Completion]:
        """Completions for the whole input line: command names, then arguments."""
        try:
            return self._complete(text, ctx)[:MAX_COMPLETIONS]
        except Exception:
            log.debug("completion of %r failed", text, exc_info=True)
            return []

    def _complete(self, text: str, ctx: CommandContext) -> list[Completion]:
        match = _LINE.fullmatch(text)
        if match is None or not self.is_command(text):
            return []
        name, space, rest = match.groups()
        if not space:
            return self._name_completions(name)
        command = self.get(name)
        if command is None or not command.takes_arguments:
            return []
        head = f"/{command.name} "
        if command.text:
            return self._text_completions(command, ctx, head, rest)
        return self._word_completions(command, ctx, head, rest)

    def _name_completions(self, prefix: str) -> list[Completion]:
        key = prefix.casefold()
        out = []
        for c in self.commands:
            if c.name.startswith(key) or any(a.startswith(key) for a in c.aliases):
                value = f"/{c.name} " if c.takes_arguments else f"/{c.name}"
                out.append(Completion(value, f"/{c.name}", c.help))
        return out

    def _complete_names(self, ctx: CommandContext, words: tuple[str, ...],
                        prefix: str) -> Candidates:
        return [(c.name, c.help) for c in self.commands]

    @staticmethod
    def _filtered(candidates: Candidates, prefix: str) -> Candidates:
        key = prefix.casefold()
        return [(v, h) for v, h in candidates if v.casefold().startswith(key)]

    def _text_completions(self, command: Command, ctx: CommandContext, head: str,
                          rest: str) -> list[Completion]:
        out = [Completion(head + f, f, "") for f in command.flags if f.startswith(rest)]
        if command.complete is not None:
            candidates = self._filtered(command.complete(ctx, (), rest), rest)
            out += [Completion(head + v, v, h) for v, h in candidates]
        return out

    def _word_completions(self, command: Command, ctx: CommandContext, head: str,
                          rest: str) -> list[Completion]:
        words = _lenient_split(rest)
        done, prefix = words[:-1], words[-1]
        positional = tuple(w for w in done if not w.startswith("--"))
        before = "".join(_quote(w) + " " for w in done)
        out: list[Completion] = []
        if prefix.startswith("-"):
            out += [Completion(head + before + f + " ", f, "") for f in command.flags
                    if f.startswith(prefix) and f not in done]
        if command.max_args is not None and len(positional) >= command.max_args:
            return out
        if command.complete is None:
            return out
        more = command.max_args is None or len(positional) + 1 < command.max_args
        for value, help_text in self._filtered(command.complete(ctx, positional, prefix),
                                               prefix):
            tail = " " if more and not value.endswith("/") else ""
            out.append(Completion(head + before + _quote(value) + tail, value, help_text))
        return out

    # -- /help --------------------------------------------------------------------
    def _help(self, ctx: CommandContext, args: Args) -> CommandResult:
        if not args.words:
            if ctx.interactive:  # the screen shows them
                return CommandResult.info("The commands by topic.", open_screen="help")
            return CommandResult.markdown(help_markdown(self.help_sections()))
        command = self.get(args.words[0])
        if command is None:
            raise self._unknown(args.words[0].lstrip("/"))
        lines = [f"**{command.usage_line}**", "", command.help + "."]
        if command.aliases:
            lines += ["", "Also: " + ", ".join(f"/{a}" for a in command.aliases)]
        if command.details:
            lines += ["", command.details]
        if command.explain is not None:
            lines += ["", command.explain(ctx)]
        return CommandResult.markdown("\n".join(lines))
