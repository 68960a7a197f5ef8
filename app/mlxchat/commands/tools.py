"""The MCP tools commands: /tools (servers, their tools, what each costs in
the window), /tools on|off [SERVER|SERVER.TOOL] (for this session), and
/tools trust (the 'always allow' grants: list, revoke)."""

from __future__ import annotations

from mlxchat.commands.base import (
    Args,
    Candidates,
    Command,
    CommandContext,
    CommandError,
    CommandResult,
    ago,
    one_line,
)
from mlxchat.tools import catalog
from mlxchat.units import fmt_int, plural

USAGE = "/tools [on|off [SERVER|SERVER.TOOL] · trust [revoke N|SERVER.TOOL|all]]"


def _cell(text: str) -> str:
    """Text for a Markdown table cell."""
    return one_line(text, 90).replace("|", "\\|") or "–"


def _server_line(status) -> str:
    if status.state == "ready":
        took = f" · started in {status.start_s:.1f} s" if status.start_s is not None else ""
        return (f"- **{status.name}** ready · {plural(len(status.tools), 'tool')}{took} · "
                f"`{status.describe}`")
    why = f": {status.why}" if status.why else ""
    return f"- **{status.name}** {status.state}{why}"


def listing(ctx: CommandContext) -> CommandResult:
    tools = ctx.conversation.tools
    progress = ctx.progress
    statuses = tools.survey(progress=(lambda text, done, total: progress(text, done, total))
                            if progress is not None else None)
    everything = [t for s in statuses if s.state == "ready" for t in s.tools]
    costs, total = tools.costs(everything)
    choice = tools.choice
    using = f"this session uses `{choice}`: {fmt_int(total)} tokens in every prompt" \
        if choice else "this session uses none (/tools on [SERVER|SERVER.TOOL])"
    note = tools.template_note()
    lines = [f"**MCP servers** ({tools.host.config.path}) · {using}", "",
             *([f"**Note:** {note}", ""] if note else []),
             *(_server_line(s) for s in statuses)]
    if costs:
        lines += ["", "| tool | used | tokens | the server says | what it does |",
                  "|---|---|---|---|---|"]
        for cost in costs:
            used = "yes" if catalog.chosen(choice, cost.tool) else "no"
            lines.append(f"| {cost.tool.qualified} | {used} | {fmt_int(cost.tokens)} | "
                         f"{_cell(', '.join(cost.tool.hints()))} | "
                         f"{_cell(cost.tool.description)} |")
        lines += ["", "The server's hints are its own claims: every call still asks first "
                      "(/tools trust lists what runs unasked)."]
    return CommandResult.markdown("\n".join(lines))


def switch(ctx: CommandContext, on: bool, target: str) -> CommandResult:
    conv = ctx.conversation
    before = conv.tools.choice
    if on:
        starting = conv.tools.turn_on(target)
    else:
        conv.tools.turn_off(target)
        starting = []
    after = conv.tools.choice
    if after == before:
        return CommandResult.info(f"Tools unchanged for this session: {after or 'none'}.",
                                  clear_input=True)
    note = " The next turn starts a new token ledger (the tools are part of every prompt)." \
        if conv.messages else ""
    start = f" Starting {', '.join(starting)} in the background." if starting else ""
    unseen = conv.tools.template_note() if after else None
    return CommandResult.info(f"Tools for this session: {after or 'none'}.{start}{note}"
                              + (f"\n{unseen}" if unseen else ""), clear_input=True)


def trust(ctx: CommandContext, words: tuple[str, ...]) -> CommandResult:
    tools = ctx.conversation.tools
    grants = tools.grants()
    if not words:
        if not grants:
            return CommandResult.info("No tool runs unasked: every call asks first ('always' "
                                      "in the consent dialog adds one here).")
        rows = [(str(i), f"{g.server}.{g.tool}",
                 "everywhere" if g.session_id is None else "this session",
                 ago(g.created, ctx.now())) for i, g in enumerate(grants, 1)]
        return CommandResult.table("Tools that run without asking (/tools trust revoke "
                                   "N|SERVER.TOOL|all)", ("#", "tool", "where", "since"), rows)
    if words[0] != "revoke" or len(words) != 2:
        raise CommandError(f"Usage: {USAGE}")
    which = words[1]
    if which == "all":
        chosen = grants
    elif which.isdigit() and 1 <= int(which) <= len(grants):
        chosen = [grants[int(which) - 1]]
    else:
        chosen = [g for g in grants if f"{g.server}.{g.tool}" == which]
    if not chosen:
        raise CommandError(f"No grant {one_line(which, 40)!r}; /tools trust lists them.")
    n = tools.revoke(chosen)
    names = ", ".join(sorted({f"{g.server}.{g.tool}" for g in chosen}))
    return CommandResult.info(f"Revoked {plural(n, 'grant')} ({names}): those calls ask "
                              "first again.", clear_input=True)


def tools_command(ctx: CommandContext, args: Args) -> CommandResult:
    words = args.words
    if not words:
        return listing(ctx)
    if words[0] in ("on", "off") and len(words) <= 2:
        return switch(ctx, words[0] == "on", words[1] if len(words) > 1 else "*")
    if words[0] == "trust":
        return trust(ctx, words[1:])
    raise CommandError(f"Usage: {USAGE}")


def complete_tools(ctx: CommandContext, words: tuple[str, ...], prefix: str) -> Candidates:
    if not words:
        return [("on", "use tools in this session"), ("off", "stop using them"),
                ("trust", "what runs without asking")]
    tools = ctx.conversation.tools
    if words[0] in ("on", "off") and len(words) == 1 and tools.host is not None:
        names = [(n, "server") for n in tools.host.config.names]
        return names + [(t.qualified, t.description[:60]) for s in tools.statuses()
                        for t in s.tools]
    if words[0] == "trust" and len(words) == 1:
        return [("revoke", "stop one from running unasked")]
    if words[:2] == ("trust", "revoke") and len(words) == 2:
        return [("all", "every grant")] + [(f"{g.server}.{g.tool}", "") for g in tools.grants()]
    return []


COMMANDS = (
    Command("tools", tools_command, "MCP tools: servers, tools and their cost; on/off; trust",
            usage=USAGE, max_args=3, complete=complete_tools,
            details="Servers come from mcp.json in the config folder (`mlxchat tools import "
                    "FILE` reads a Claude Desktop, Cursor or LM Studio file). Every call the "
                    "model makes asks first: allow once, always (this session or everywhere), "
                    "deny, or deny and tell the model why. /set tool_timeout, "
                    "tool_result_tokens and max_tool_steps tune the loop."),
)
