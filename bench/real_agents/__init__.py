"""The real coding agents, one module per client, as ``bench/agents_real.py``
runs them against ``mlxchat serve``.

Each client module (``claude_code.py``, ``codex_cli.py``, ...) exposes:

``NAME: str``
    The client's name in the figures ("claude_code").
``install(prefix: Path) -> Path``
    The client's binary: found under ``prefix`` when installed there already,
    else installed there (``npm install --prefix PREFIX PACKAGE@VERSION``,
    never globally). Raises ``RuntimeError`` (one line) when it cannot be.
``run_step(binary: Path, *, base_url: str, model: str, workdir: Path,
home: Path, prompt: str, first: bool, timeout_s: float) -> dict``
    One headless step of the client in ``workdir`` (a scratch git
    repository), ``home`` its scratch HOME (its settings and transcripts),
    pointed at the server at ``base_url`` (``http://127.0.0.1:PORT``, no
    ``/v1``) and its ``model``; ``first`` False continues the session the
    earlier steps in ``workdir`` made. Returns ``ok`` (bool: the client
    ended with no API error; the model's words do not matter), ``error``
    (str or None: what went wrong, one line), ``exit_code`` (int or None
    when it was killed at ``timeout_s``) and ``output`` (what it printed,
    cut to a few KB).

Optional: ``TOOL_CALL: dict`` (``name``, ``arguments``, ``prompt``, ``expect``):
a call the client runs without asking, as a scripted model makes it
(``scripted_serve.py``) when given ``prompt``; the result it sends back holds
``expect`` (Claude Code: Bash ``echo hi``).

``MAX_OUTPUT_VARIABLE`` (``REAL_AGENT_MAX_OUTPUT``), when set in the
environment, is the reply length a client asks for (its own setting: Claude
Code's ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``), so a small model's words do not
take a run's time.

A client module imports nothing of mlxchat: the benchmark reads the
server's side of each request from the server's access log.
"""

MAX_OUTPUT_VARIABLE = "REAL_AGENT_MAX_OUTPUT"
