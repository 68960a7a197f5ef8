"""Private atomic writes and file hashing."""

import hashlib
import stat

from mlxchat.config import Settings, load_settings, save_settings
from mlxchat.files import sha256_file, write_private_text
from mlxchat.paths import ensure_private_dir


def test_write_is_private_atomic_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "f.txt"
    write_private_text(target, "one")
    write_private_text(target, "two")
    assert target.read_text() == "two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["f.txt"]


def test_writes_never_change_the_mode_of_a_folder_they_did_not_make(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o755)
    write_private_text(theirs / "f.txt", "one")
    assert ensure_private_dir(theirs) == theirs
    write_private_text(theirs / "new" / "deeper" / "f.txt", "two")
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o755
    for made in (theirs / "new", theirs / "new" / "deeper"):  # what it makes is private
        assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_sha256_reports_progress_to_the_end(tmp_path):
    f = tmp_path / "b.bin"
    f.write_bytes(b"x" * (9 << 20))
    seen = []
    assert sha256_file(f, on_progress=lambda d, t: seen.append((d, t))) == \
        hashlib.sha256(f.read_bytes()).hexdigest()
    assert seen[-1] == (9 << 20, 9 << 20) and len(seen) == 2


def test_config_strings_with_control_characters_round_trip(tmp_path):
    s = Settings()
    s.system_prompt = 'Tabs\there, "quotes", a\\backslash\nand a bell \x07'
    save_settings(s, tmp_path / "c.toml")
    assert load_settings(tmp_path / "c.toml", env=False).system_prompt == s.system_prompt


def test_relative_time_is_shared_by_the_cli_and_the_ui():
    from mlxchat.chat import relative_time
    from mlxchat.tui.screens import sessions

    assert sessions.relative_time is relative_time
    assert relative_time(1000.0, 1000.0 + 7200) == "2 h ago"
