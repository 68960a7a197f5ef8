"""Ollama's Go chat templates -> Jinja chat templates, for the common subset.

Handled: ``range .Messages``, ``.Role``, ``.Content``, ``.System`` (all system
messages joined, as Ollama does), ``if``/``else if``/``else``/``end`` on those
and on ``eq``/``ne .Role "x"``, and the ``{{-``/``-}}`` trim markers (Jinja has
the same). Text after the messages loop (the assistant header) only appears
with ``add_generation_prompt``. Anything else (``$last``, ``slice``, tools,
the single-turn ``.Prompt``/``.Response`` form) returns None: the caller then
uses the GGUF's own template.
"""

from __future__ import annotations

import re

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_SYSTEM = ("{%+ set system = messages | selectattr('role', 'equalto', 'system') "
           "| map(attribute='content') | join('\\n\\n') +%}")


class _Untranslatable(Exception):
    pass


def _value(expr: str, in_loop: bool) -> str:
    expr = expr.removeprefix("$")
    if expr in (".Role", ".Content") and in_loop:
        return f"message['{expr[1:].lower()}']"
    if expr == ".System":
        return "system"
    if re.fullmatch(r'"[^"\\]*"', expr):
        return "'" + expr[1:-1].replace("'", "\\'") + "'"
    raise _Untranslatable(expr)


def _condition(expr: str, in_loop: bool) -> str:
    m = re.fullmatch(r"(eq|ne)\s+(\S+)\s+(\S+)", expr)
    if m:
        op = "==" if m.group(1) == "eq" else "!="
        return f"{_value(m.group(2), in_loop)} {op} {_value(m.group(3), in_loop)}"
    return _value(expr, in_loop)


def _action(body: str, stack: list[str]) -> str:
    in_loop = "for" in stack
    if body == "range .Messages" or body == "range $.Messages":
        if in_loop:
            raise _Untranslatable(body)
        stack.append("for")
        return "for message in messages"
    if body.startswith("if "):
        stack.append("if")
        return f"if {_condition(body[3:].strip(), in_loop)}"
    if body.startswith("else if "):
        if not stack or stack[-1] != "if":
            raise _Untranslatable(body)
        return f"elif {_condition(body[8:].strip(), in_loop)}"
    if body == "else" and stack and stack[-1] == "if":
        return "else"
    if body == "end" and stack:
        return "end" + stack.pop()
    raise _Untranslatable(body)


def _literal(text: str) -> str:
    """Go template text with Jinja's own delimiters made literal."""
    return re.sub(r"\{[#%]", lambda m: "{{ '" + m.group(0) + "' }}", text)


def go_to_jinja(template: str) -> str | None:
    """The Jinja equivalent of an Ollama Go template, or None outside the subset."""
    out, stack, pos, loop_end = [], [], 0, None
    try:
        for m in _ACTION.finditer(template):
            out.append(_literal(template[pos:m.start()]))
            pos = m.end()
            left, body, right = m.group(1), m.group(2), m.group(3)
            if body.startswith("/*"):
                continue  # a comment
            if body.startswith((".", "$.")) and " " not in body:
                out.append(f"{{{{{left} {_value(body, 'for' in stack)} {right}}}}}")
                continue
            statement = _action(body, stack)
            # '+' keeps Go's whitespace under the trim_blocks/lstrip_blocks that
            # chat templates are rendered with; '-' trims as Go's '-' does.
            out.append(f"{{%{left or '+'} {statement} {right or '+'}%}}")
            if statement == "endfor":
                loop_end = len(out)
    except _Untranslatable:
        return None
    out.append(_literal(template[pos:]))
    if stack or loop_end is None:
        return None
    tail = "".join(out[loop_end:])
    head = "".join(out[:loop_end])
    if re.search(r"\{%[-+]? (end|if|elif|else|for)", tail):
        return None  # the loop sits inside a block: no safe place for the header
    if tail.strip():
        tail = "{%+ if add_generation_prompt +%}" + tail + "{%+ endif +%}"
    return _SYSTEM + head + tail


def with_default_system(template: str, system: str) -> str:
    """Put Ollama's default system prompt first when the conversation has none."""
    literal = system.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return ("{% if not messages or messages[0]['role'] != 'system' %}"
            f"{{% set messages = [{{'role': 'system', 'content': '{literal}'}}] + messages %}}"
            "{% endif %}" + template)
