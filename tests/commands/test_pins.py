"""/pin /unpin /pins on a real conversation: what they report, what they refuse
(one line, nothing changed)."""

from __future__ import annotations

from .conftest import send


def test_pin_list_and_unpin(registry, ctx, conv, tmp_path):
    (tmp_path / "work" / "notes.md").write_text("The harbour opens at nine.\n" * 20)
    said = registry.run("/pin notes.md", ctx)
    assert said.ok and said.text.startswith("Pinned notes.md:") and said.session_changed
    assert [p.name for p in conv.session.pins] == ["notes.md"]
    listed = registry.run("/pins", ctx)
    assert listed.kind == "table" and listed.rows[0][0] == "notes.md"
    assert listed.rows[0][1] == f"{conv.session.pins[0].tokens:,}"
    assert listed.rows[0][3] == "this one" and listed.rows[0][4] == "after the next turn"
    send(conv, "When?")
    assert registry.run("/pins", ctx).rows[0][4] == "yes"
    shown = registry.run("/context", ctx)
    pinned = [r for r in shown.rows if r[1] == "pinned"]
    assert [r[2] for r in pinned] == ["notes.md"] and shown.rows[1] == pinned[0]
    assert pinned[0][3] == f"{conv.session.pins[0].tokens:,}"
    assert shown.rows[0][1] == "system" and "harbour" not in shown.rows[0][2]
    assert [c.display for c in registry.complete("/unpin ", ctx)] == ["notes.md", "all"]
    gone = registry.run("/unpin notes.md", ctx)
    assert gone.ok and "Unpinned notes.md" in gone.text and conv.session.pins == []
    assert "No pinned documents" in registry.run("/pins", ctx).text


def test_pin_refusals_change_nothing(registry, ctx, conv, tmp_path):
    work = tmp_path / "work"
    (work / "image.bin").write_bytes(b"\x89PNG\0\0\x01")
    (work / "latin1.txt").write_bytes("café".encode("latin-1"))
    (work / "big.bin").write_bytes(b"\x7fELF\x02\x01\x01\0" + bytes(range(256)) * 800)  # 200 KB
    (work / "big-latin1.txt").write_bytes("café ".encode("latin-1") * 40_000)
    (work / "folder").mkdir()
    (work / "huge.txt").write_text("y" * 3000)  # ~3,000 tokens > the 2,048 window
    (work / "note.txt").write_text("A short note.")
    assert registry.run("/pin note.txt", ctx).ok
    expected = {
        "image.bin": "looks binary", "latin1.txt": "is not UTF-8 text",
        "big.bin": "looks binary", "big-latin1.txt": "is not UTF-8 text",  # at any size
        "folder": "is a folder", "missing.txt": "No such file", "huge.txt": "tokens; only",
        "note.txt": "pinned already",
    }
    for name, words in expected.items():
        result = registry.run(f"/pin {name}", ctx)
        assert result.kind == "error" and words in result.text, (name, result.text)
        assert "\n" not in result.text
    bad = registry.run("/unpin other.md", ctx)
    assert bad.kind == "error" and "No pinned document" in bad.text
    assert [p.name for p in conv.session.pins] == ["note.txt"]
