"""The open session's MCP tools (``conv.tools``): which of the configured
servers' tools it uses (the ``tools`` setting, stored with the session), their
definitions as the template renders them (part of the token ledger's key),
starting the servers it needs in the background, what each tool costs in the
window, and the 'always allow' grants it may run under.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from mlxchat.chat import Message
from mlxchat.engine.interface import Engine
from mlxchat.generation import TOOL_RESULT_SHARE
from mlxchat.models import tool_prompt
from mlxchat.models.tool_prompt import renders_tools
from mlxchat.session.current import OpenSession
from mlxchat.session.ledger import options_for
from mlxchat.store import SessionStore
from mlxchat.store.tool_grants import ToolGrant
from mlxchat.tools import catalog
from mlxchat.tools.catalog import ToolInfo
from mlxchat.tools.errors import ToolsError
from mlxchat.tools.host import ServerStatus, ToolHost

Progress = Callable[[str, int, int], None]


@dataclass
class ToolCost:
    """What a tool's definition adds to every prompt of the session."""

    tool: ToolInfo
    model_name: str
    tokens: int


class SessionTools:
    """The session's choice of tools over the process's one ``ToolHost``
    (None: this conversation has no tools, as the API server's)."""

    def __init__(self, open_session: OpenSession, store: SessionStore, engine: Engine, *,
                 host: ToolHost | None):
        self._open = open_session
        self._grants = store.tool_grants
        self._session_grants = True
        self._engine = engine
        self.host = host
        self._said: set[object] = set()
        """What the user was told of once: servers' failures, the template's note."""
        self._named: tuple[tuple[str | None, int], dict[str, ToolInfo]] | None = None
        self.cancel_event = threading.Event()
        """Set by escape (``cancel``): a call or a wait in progress stops."""
        self.switch_hint = "/set tool_prompt generic"
        """How the user turns the generic tool prompt on, where they are."""
        open_session.session_tools = self.definitions

    # -- the session's choice ------------------------------------------------------------
    @property
    def available(self) -> bool:
        return self.host is not None and bool(self.host.config.names)

    @property
    def choice(self) -> str | None:
        return self._open.generation.tools if self.host is not None else None

    def servers(self) -> list[str]:
        """The configured servers the session's choice uses."""
        if self.host is None:
            return []
        return catalog.servers_of(self.choice, self.host.config.servers)

    def _need_host(self) -> ToolHost:
        """The host, its configuration read again if the file changed."""
        if self.host is None:
            raise ToolsError("Tools are not available here.")
        self.host.refresh()
        problem = self.host.config.unusable()
        if problem:
            raise ToolsError(problem)
        return self.host

    def turn_on(self, target: str = "*") -> list[str]:
        """Use ``target`` ('*', SERVER or SERVER.TOOL) from the next message on;
        starts its servers in the background (returns those starting)."""
        host = self._need_host()
        choice = catalog.turned_on(self.choice, target, configured=host.config.names)
        self._open.change_generation(tools=choice)
        return host.start(self.servers(), again=True)

    def turn_off(self, target: str = "*") -> None:
        host = self._need_host()
        self._open.change_generation(
            tools=catalog.turned_off(self.choice, target, configured=host.config.names))

    def start(self) -> list[str]:
        """Start the servers the session uses, in the background (at open)."""
        return self.host.start(self.servers()) if self.host is not None else []

    def ready(self, *, progress: Progress | None = None) -> list[str]:
        """Wait (bounded) until the session's servers are up; one line for each
        that failed or exited and was not said yet."""
        if self.host is None or not self.choice:
            return []
        self.host.refresh()  # mcp.json may have changed since the last turn
        self.cancel_event.clear()
        self.host.start(self.servers())
        self.host.wait(self.servers(), progress=progress, cancel=self.cancel_event)
        lines = []
        note = self.template_note()
        if note is not None and ("template", note) not in self._said:
            self._said.add(("template", note))
            lines.append(note)
        for status in self.host.statuses():
            key = f"{status.name}:{status.state}:{status.why}"
            if status.name in self.servers() and status.state in ("failed", "exited") \
                    and key not in self._said:
                self._said.add(key)
                lines.append(f"MCP server {status.name} {status.state}: {status.why}; "
                             "its tools are left out.")
        return lines

    def template_note(self) -> str | None:
        """One line when the model's chat template renders no tools (a render
        with one is the same as without): what the model gets instead, and what
        works. None when the template shows them."""
        if renders_tools(self._engine.loaded.tokenizer):
            return None
        return tool_prompt.template_note(
            self._engine.info.name, generic=self._open.generation.tool_prompt == "generic",
            switch=self.switch_hint)

    def statuses(self) -> list[ServerStatus]:
        return self.host.statuses() if self.host is not None else []

    # -- what the model sees ---------------------------------------------------------------
    def named(self) -> dict[str, ToolInfo]:
        """The chosen tools of the servers that are up, by the name the model calls."""
        if self.host is None or not self.choice:
            return {}
        key = (self.choice, self.host.changes)
        if self._named is None or self._named[0] != key:
            tools = [t for t in self.host.tools(self.servers()) if catalog.chosen(self.choice, t)]
            self._named = (key, catalog.model_names(tools))
        return self._named[1]

    def definitions(self) -> str | None:
        """The tools' definitions for the template (canonical JSON), or None."""
        return catalog.definitions_json(self.named())

    def costs(self, tools: list[ToolInfo] | None = None) -> tuple[list[ToolCost], int]:
        """Tokens each tool's definition adds to every prompt (``tools``, else
        the chosen ones), and what the chosen ones add together."""
        named = self.named()
        listed = catalog.model_names(tools) if tools is not None else named
        prompts = self._engine.prompts
        probe = self._open.with_system([Message("user", "?")])

        def tokens(definitions: str | None) -> int:
            options = options_for(self._open.session, self._open.generation, tools=definitions)
            return len(prompts.render_tokens(probe, options=options))
        base = tokens(None)
        each = [ToolCost(t, n, tokens(catalog.definitions_json({n: t})) - base)
                for n, t in sorted(listed.items(), key=lambda item: item[1].qualified)]
        return each, (tokens(self.definitions()) - base if named else 0)

    def survey(self, *, progress: Progress | None = None) -> list[ServerStatus]:
        """Every configured server started (if it was not) and waited for,
        bounded: what ``/tools`` lists. No tool runs."""
        host = self._need_host()
        self.cancel_event.clear()
        host.start(host.config.servers)
        host.wait(host.config.servers, progress=progress, cancel=self.cancel_event)
        return host.statuses()

    def result_budget(self) -> int:
        """Tokens a result may take: the setting, or a tenth of the window."""
        settings = self._open.generation
        window = self._engine.prompts.window(settings)
        return settings.tool_result_tokens or max(window // TOOL_RESULT_SHARE, 32)

    # -- grants ------------------------------------------------------------------------------
    def granted(self, tool: ToolInfo) -> bool:
        fingerprint = self._fingerprint(tool.server)
        return fingerprint is not None and self._grants.find(
            tool.server, tool.name, fingerprint, session_id=self._session_id()) is not None

    @property
    def session_grants(self) -> bool:
        """Whether 'allow always in this session' can be kept (not for a
        one-off question's session, which is in memory)."""
        return self._session_grants

    def grants_from(self, store: SessionStore) -> None:
        """Keep and read grants in ``store`` (a one-off question's session is in
        memory: its 'everywhere' grants are the app's); none per session then."""
        self._grants, self._session_grants = store.tool_grants, False

    def grant(self, tool: ToolInfo, *, everywhere: bool) -> None:
        fingerprint = self._fingerprint(tool.server)
        if fingerprint is not None and (everywhere or self._session_grants):
            self._grants.grant(tool.server, tool.name, fingerprint,
                                   session_id=None if everywhere else self._session_id())

    def grants(self) -> list[ToolGrant]:
        return self._grants.listed(session_id=self._session_id())

    def revoke(self, grants: list[ToolGrant]) -> int:
        return self._grants.revoke([g.id for g in grants])

    def _session_id(self) -> int | None:
        return self._open.id if self._session_grants else None

    def _fingerprint(self, server: str) -> str | None:
        config = self.host.config.servers.get(server) if self.host is not None else None
        return config.fingerprint() if config is not None else None

    # -- the end ---------------------------------------------------------------------------
    def cancel(self) -> None:
        self.cancel_event.set()
