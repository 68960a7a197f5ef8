"""A session database that exists but cannot be written is called read-only,
not 'cannot create' (issue 9, item 13)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mlxchat.store import StoreError, open_store, opening


def refuse_writing(real_open):
    """os.open as on a read-only file system: opening for writing fails with EROFS."""
    def guarded(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)
    return guarded


def test_a_database_on_a_read_only_file_system_is_called_read_only(db_path: Path,
                                                                    monkeypatch):
    open_store(db_path).close()
    monkeypatch.setattr(opening.os, "open", refuse_writing(os.open))
    with pytest.raises(StoreError) as err:
        open_store(db_path)
    text = str(err.value)
    assert "is read-only" in text and str(db_path) in text and "Cannot create" not in text


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a file without write permission")
def test_a_read_only_database_file_is_called_read_only(db_path: Path):
    open_store(db_path).close()
    db_path.chmod(0o400)
    with pytest.raises(StoreError, match="is read-only"):
        open_store(db_path)

