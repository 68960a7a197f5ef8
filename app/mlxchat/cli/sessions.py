"""`mlxchat sessions ...`: list, show, export, import, rename and delete saved chats."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

LIST_LIMIT = 50
"""Sessions `mlxchat sessions list` prints without --limit."""


def add_sessions_parser(sub) -> None:
    p = sub.add_parser("sessions", help="list, show, export, rename or delete saved sessions",
                       description="Manage saved sessions.")
    # A bare `mlxchat sessions` lists: give it the list options' defaults.
    p.set_defaults(search=None, limit=LIST_LIMIT, json=False)
    ss = p.add_subparsers(dest="action", metavar="ACTION")
    ls = ss.add_parser("list", help="newest first; --search finds what was said")
    ls.add_argument("--search", help="full-text search over messages")
    ls.add_argument("--limit", type=int, default=LIST_LIMIT)
    ls.add_argument("--json", action="store_true")
    show = ss.add_parser("show", help="print a session's current branch as Markdown")
    show.add_argument("session", help="id or title")
    exp = ss.add_parser("export", help="write a session as Markdown or JSON")
    exp.add_argument("session", help="id or title")
    exp.add_argument("--format", "-f", choices=("md", "json"), default="md")
    exp.add_argument("--out", "-o", help="file, or folder, in a folder that exists "
                     "(default: the exports folder)")
    imp = ss.add_parser("import", help="import a session exported as JSON")
    imp.add_argument("file")
    ren = ss.add_parser("rename", help="rename a session")
    ren.add_argument("session", help="id or title")
    ren.add_argument("title")
    rm = ss.add_parser("delete", help="delete a session and its KV snapshot")
    rm.add_argument("session", help="id or title")
    rm.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def run_sessions(args: argparse.Namespace) -> int:
    from mlxchat.chat import human_bytes, relative_time
    from mlxchat.errors import UserError
    from mlxchat.store import open_store
    from mlxchat.store.export import export_session, render_session
    from mlxchat.store.importing import import_json

    store = open_store()
    action = args.action or "list"
    if action == "list":
        rows = store.list_sessions(limit=args.limit, search=args.search)
        if args.json:
            print(json.dumps([r.__dict__ for r in rows], indent=2))
            return 0
        if not rows:
            print("no sessions" if not args.search else "no matches")
            return 0
        for r in rows:
            snap = f"  kv {human_bytes(r.snapshot_bytes)}" if r.snapshot_bytes else ""
            api = "  [api]" if r.from_api else ""
            print(f"#{r.id:<4} {r.title[:50]:<50}  {r.model:<16} {r.message_count:>3} msgs  "
                  f"{relative_time(r.updated)}{snap}{api}")
            if r.snippet:
                print(f"       {r.snippet}")
        return 0
    if action == "import":
        session = import_json(store, Path(args.file).expanduser())
        print(f"imported as #{session.id} {session.title!r}")
        return 0
    session = store.find_session(args.session)
    if action == "show":
        sys.stdout.write(render_session(store, session.id, "md"))
    elif action == "export":
        # -o names the place (any folder of the user's); else the exports folder.
        print(export_session(store, session.id, args.format, args.out or None, cwd=Path.cwd()))
    elif action == "rename":
        print(f"#{session.id} is now {store.rename_session(session.id, args.title).title!r}")
    elif action == "delete":
        if not args.yes:
            if not sys.stdin.isatty():
                raise UserError(f"deleting #{session.id} needs --yes when not at a terminal")
            answer = input(f"Delete #{session.id} {session.title!r}? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("kept")
                return 1
        from mlxchat.session.saved import delete_stored_session

        _, left = delete_stored_session(store, session.id)
        for path in left:
            print(f"could not delete {path}; remove it by hand", file=sys.stderr)
        print(f"deleted #{session.id} {session.title!r}")
    return 0
