"""Exports carry a message's images: JSON with their bytes (base64, brought
back by an import, checked against their digest), Markdown as links."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlxchat import paths
from mlxchat.chat import Message
from mlxchat.store import StoreError, open_store
from mlxchat.store.export import render_session
from mlxchat.store.importing import import_json
from mlxchat.store.image_files import store_image


def _session_with_image(db, tmp_path):
    (tmp_path / "pic.png").write_bytes(b"\x89PNG pretend bytes \x00\x01")
    ref = store_image(tmp_path / "pic.png", width=4, height=3)
    store = open_store(db)
    s = store.create_session("m")
    store.add_messages(s.id, [Message("user", "What is it?", images=(ref,))])
    store.add_message(s.id, "assistant", "A picture.")
    return store, s.id, ref


def test_json_export_carries_the_image_and_import_brings_it_back(db_path, tmp_path):
    store, sid, ref = _session_with_image(db_path, tmp_path)
    text = render_session(store, sid, "json")
    shutil.rmtree(paths.images_dir())  # another machine: no image kept there
    imported = import_json(store, text)
    (image,) = store.get_session(imported.id).messages[0].images
    assert (image.digest, image.name, image.width, image.height) == (ref.digest, "pic.png", 4, 3)
    assert Path(image.path).read_bytes() == (tmp_path / "pic.png").read_bytes()
    markdown = render_session(store, sid, "md")
    assert f"![pic.png]({Path(ref.path).as_uri()})" in markdown
    store.close()


def test_an_image_whose_bytes_are_not_its_digest_imports_nothing(db_path, tmp_path):
    store, sid, _ = _session_with_image(db_path, tmp_path)
    doc = json.loads(render_session(store, sid, "json"))
    doc["messages"][0]["images"][0]["data"] = "AAAA"
    shutil.rmtree(paths.images_dir())
    before = len(store.list_sessions())
    with pytest.raises(StoreError, match=r"messages\[0\]\.images\[0\]\.data does not match"):
        import_json(store, json.dumps(doc))
    assert len(store.list_sessions()) == before and not paths.images_dir().exists()
    store.close()
