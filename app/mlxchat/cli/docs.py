"""`mlxchat docs ...`: add, list, update, remove and search document collections."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from dataclasses import asdict

SHOWN_SKIPS = 20
"""Skipped files named after an index; the rest are counted."""


def add_docs_parser(sub) -> None:
    p = sub.add_parser("docs", help="index files and folders into collections and search them",
                       description="Document collections for retrieval (BM25 + embeddings).")
    ds = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = ds.add_parser("add", help="index files and folders into a collection (made if new)")
    add.add_argument("name")
    add.add_argument("paths", nargs="+", metavar="PATH")
    add.add_argument("--follow-links", action="store_true",
                     help="follow symlinks that lead out of the folders given (by default "
                     "they are skipped and named); the collection's updates do too")
    ls = ds.add_parser("list", help="collections: files, chunks, bytes, last update")
    ls.add_argument("--json", action="store_true")
    rm = ds.add_parser("remove", help="remove a collection and its index")
    rm.add_argument("name")
    up = ds.add_parser("update", help="re-index what changed (size, mtime, content hash)")
    up.add_argument("name")
    se = ds.add_parser("search", help="ranked chunks with file:lines, heading and score")
    se.add_argument("name")
    se.add_argument("query")
    se.add_argument("-k", type=int, default=5, help="how many chunks (default 5)")
    se.add_argument("--mode", choices=("hybrid", "bm25", "dense"), default="hybrid")
    se.add_argument("--json", action="store_true")


def run_docs(args: argparse.Namespace) -> int:
    from mlxchat.store import open_store

    store = open_store()
    try:
        return _ACTIONS[args.action](store, args)
    finally:
        store.close()


def _list(store, args) -> int:
    from mlxchat.chat import human_bytes, relative_time

    rows = store.documents.list()
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0
    if not rows:
        print("no collections (add one: mlxchat docs add NAME PATH...)")
    for r in rows:
        print(f"{r.name:<20} {r.files:>6} files {r.chunks:>7} chunks {human_bytes(r.bytes):>9}"
              f"  updated {relative_time(r.updated)}")
    return 0


def _remove(store, args) -> int:
    info = store.documents.delete(args.name)
    print(f"removed {info.name} ({info.files} files, {info.chunks} chunks)")
    return 0


def _index(store, args) -> int:
    from mlxchat.docs import Indexer
    from mlxchat.docs.embedder import default_embedder
    from mlxchat.docs.indexer import check_name
    from mlxchat.docs.walk import check_roots

    check_name(args.name)
    if args.action == "add":
        check_roots(args.paths)  # before the model loads: bad input fails at once
    else:
        store.documents.get(args.name)
    indexer = Indexer(store.documents, default_embedder())
    cancel = threading.Event()
    show = _progress_line(sys.stderr)

    def stop(*_) -> None:  # the first ctrl-c stops within a moment; a second at once
        cancel.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = signal.signal(signal.SIGINT, stop)
    try:
        if args.action == "add":
            report = indexer.add(args.name, args.paths, on_progress=show, cancel=cancel,
                                 follow_links=args.follow_links)
        else:
            report = indexer.update(args.name, on_progress=show, cancel=cancel)
    except KeyboardInterrupt:
        # The batch being written rolled back; a file written in batches is
        # marked incomplete and read again by the update.
        report = None
    finally:
        signal.signal(signal.SIGINT, previous)
    if report is None or report.cancelled:
        print(f"\ncancelled; `mlxchat docs update {args.name}` carries on", file=sys.stderr)
        return 130
    _print_report(report)
    return 0


def _progress_line(stream):
    if not stream.isatty():
        return None

    def show(p) -> None:
        stream.write(f"\r\033[K{p.words()}")
        stream.flush()
    return show


def _print_report(report) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
    print(f"{report.collection}: {report.files_indexed} files indexed "
          f"({report.speed_words()}), {report.files_unchanged} unchanged, "
          f"{report.files_removed} removed, {len(report.skipped)} skipped")
    if report.files_with_replacements:
        print(f"  {report.files_with_replacements} files were not valid UTF-8 "
              "(bad bytes replaced)")
    for skip in report.skipped[:SHOWN_SKIPS]:
        print(f"  skipped {skip.path}: {skip.reason}")
    if len(report.skipped) > SHOWN_SKIPS:
        print(f"  ... and {len(report.skipped) - SHOWN_SKIPS} more skipped")


def _search(store, args) -> int:
    from mlxchat.docs import DocsError, Retriever
    from mlxchat.docs.embedder import default_embedder

    if not args.query.strip():
        raise DocsError("The search query is empty.")
    if args.k < 1:
        raise DocsError("-k must be at least 1.")
    store.documents.get(args.name)  # a missing collection fails before the model loads
    hits = Retriever(store.documents, default_embedder()).search(
        args.name, args.query, k=args.k, mode=args.mode)
    if args.json:
        print(json.dumps([{**asdict(h), "place": h.place} for h in hits], indent=2))
        return 0
    if not hits:
        print("no matches")
    for n, h in enumerate(hits, 1):
        stale = f"  ({h.stale})" if h.stale else ""
        print(f"[{n}] {h.place}  {h.heading or '-'}  score {h.score:.4f}{stale}")
        for line in h.text.splitlines()[:3]:
            print(f"    {line[:100]}")
    return 0


_ACTIONS = {"list": _list, "remove": _remove, "add": _index, "update": _index,
            "search": _search}
