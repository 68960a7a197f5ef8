"""Starts one stdio MCP server so that it dies with the app, even when the app
is killed, sees only the environment its entry names, and cannot flood the
app with an endless message.

Run as ``python -I -S launch.py PARENT_PID NAMES MAX_BYTES -- COMMAND ARGS...``
(the SDK's ``stdio_client`` spawns it in a process group of its own).
``NAMES`` (comma-separated) are the variables the server keeps; their values
come through the environment, never the command line, where ``ps`` shows
them. The launcher forks the server (its stdin is the app's pipe as it is)
and relays the server's stdout line by line, in linear time: a tool result
over ``MAX_BYTES`` is cut to its first ``MAX_BYTES`` of text before the app
reads it (the SDK joins a long line in quadratic time: 5 MB cost 6 s of CPU
here, 20 MB 51 s). On Linux both processes ask the kernel to kill them when
their parent goes (``PR_SET_PDEATHSIG``); elsewhere the relay watches the app
and kills the group when it is gone.

Standalone on purpose (stdlib only, imports nothing of mlxchat): it starts
in milliseconds with ``-I -S``.
"""

import json
import os
import select
import signal
import sys

PR_SET_PDEATHSIG = 1
WATCH_S = 0.2
CHUNK = 1 << 20
HARD_MAX = 256 << 20
"""A message longer than this is dropped unread (answered with an error)."""
CUT_MARK = "[mlxchat: the server sent "
LINUX = sys.platform.startswith("linux")


def _die_with(parent):
    """The kernel kills this process when ``parent`` exits (Linux)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it exited before the kernel was asked
        os._exit(1)


def _start(command, env, pipe, relay_pid):
    child = os.fork()
    if child:
        return child
    try:
        os.dup2(pipe[1], 1)
        os.close(pipe[0])
        os.close(pipe[1])
        if LINUX:
            _die_with(relay_pid)
        os.execvpe(command[0], command, env)
    except OSError as exc:
        os.write(2, f"cannot start {command[0]}: {exc.strerror or exc}\n".encode())
    os._exit(127)


def _cut_text(items, budget):
    out = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        text = item.get("text")
        if isinstance(text, str):
            out.append({**item, "text": text[:max(budget, 0)]})
            budget -= len(out[-1]["text"])
        elif len(json.dumps(item)) <= max(budget, 0):
            out.append(item)
            budget -= len(json.dumps(item))
        else:
            out.append({"type": "text", "text": f"[{item.get('type', 'content')} left out]"})
    return out


def _cut_strings(value, left):
    """``value`` (structured content) with its strings cut to ``left[0]``
    characters in all; the shape stays, so the tool's output schema holds."""
    if isinstance(value, str):
        keep = value[:max(left[0], 0)]
        left[0] -= len(keep)
        return keep
    if isinstance(value, dict):
        return {k: _cut_strings(v, left) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, left) for v in value]
    return value


def cut_message(line, limit):
    """An oversized line made to fit: a tool result's text cut to ``limit``
    characters, with a first line that says so; any other message with an id
    answered by an error; else None (dropped)."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or "id" not in message:
        return None
    result = message.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        if "structuredContent" in result:
            result["structuredContent"] = _cut_strings(result["structuredContent"], [limit])
        mark = {"type": "text", "text": f"{CUT_MARK}{len(line):,} bytes; this is its first "
                                        f"{limit:,}]"}
        result["content"] = [mark, *_cut_text(result["content"], limit)]
        return (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")
    error = {"code": -32603, "message": f"the server's message was {len(line):,} bytes, "
                                        f"over mlxchat's limit of {limit:,}"}
    return (json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}) + "\n").encode()


def _dropped(head):
    """The error answer to a message too large to read, from its first bytes."""
    start = head.find(b'"id"')
    if start < 0:
        return b""
    try:
        value, _ = json.JSONDecoder().raw_decode(head[head.index(b":", start) + 1:].decode(
            "utf-8", "replace").lstrip())
    except ValueError:
        return b""
    error = {"code": -32603, "message": f"the server's message was over {HARD_MAX:,} bytes"}
    return (json.dumps({"jsonrpc": "2.0", "id": value, "error": error}) + "\n").encode()


def relay(source, parent, limit):
    """Copy ``source`` to stdout line by line until it ends (or the app does)."""
    pending, size, skipping = [], 0, False
    while True:
        ready, _, _ = select.select([source], [], [], WATCH_S)
        if os.getppid() != parent:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        if not ready:
            continue
        data = os.read(source, CHUNK)
        if not data:
            return
        while data:
            end = data.find(b"\n")
            piece, data = (data, b"") if end < 0 else (data[:end + 1], data[end + 1:])
            if not skipping:
                pending.append(piece)
            size += len(piece)
            if end < 0:
                if size > HARD_MAX and not skipping:
                    os.write(1, _dropped(b"".join(pending)[:4096]))
                    pending, skipping = [], True
                continue
            line = b"".join(pending)
            if not skipping:
                os.write(1, line if len(line) <= limit else (cut_message(line, limit) or b""))
            pending, size, skipping = [], 0, False


def main(argv):
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: launch.py PARENT_PID NAMES MAX_BYTES -- COMMAND [ARGS...]\n")
        return 2
    parent, names, limit, command = int(argv[0]), argv[1], int(argv[2]), argv[4:]
    env = {k: os.environ[k] for k in names.split(",") if k and k in os.environ}
    if LINUX:
        _die_with(parent)
    source, sink = os.pipe()
    child = _start(command, env, (source, sink), os.getpid())
    os.close(sink)
    try:
        relay(source, parent, limit)
    except BrokenPipeError:  # the app closed its end: the server goes too
        os.kill(child, signal.SIGTERM)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
