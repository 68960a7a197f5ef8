"""Reading a file for the index: PDF through pypdf (encrypted and damaged ones
named), HTML as text with its headings, bad UTF-8 replaced and counted."""

from __future__ import annotations

import io

import pytest

from mlxchat.docs import DocsError
from mlxchat.docs.reading import NotText, read_document


def _pdf(text: bytes) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica, with a correct xref table."""
    stream = b"BT /F1 18 Tf 20 100 Td (" + text + b") Tj ET"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 144] /Contents 4 0 R"
               b" /Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = b"%PDF-1.4\n", []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer << /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)


PDF = _pdf(b"Hello PDF world")


def test_a_pdf_is_read_page_by_page(tmp_path):
    path = tmp_path / "doc.pdf"
    path.write_bytes(PDF)
    doc = read_document(path, limit=1 << 20)
    assert doc.kind == "markdown" and doc.text.startswith("# Page 1\n\nHello PDF world")


def test_encrypted_and_damaged_pdfs_are_named(tmp_path):
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(PDF)))
    writer.encrypt("secret", algorithm="RC4-128")
    locked = tmp_path / "locked.pdf"
    with open(locked, "wb") as fh:
        writer.write(fh)
    with pytest.raises(DocsError, match=r"locked.pdf is an encrypted PDF"):
        read_document(locked, limit=1 << 20)
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 this is not really a pdf")
    with pytest.raises(DocsError, match=r"broken.pdf is not a readable PDF"):
        read_document(broken, limit=1 << 20)


def test_html_becomes_text_with_markdown_headings(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("<html><head><title>t</title><style>p{}</style></head><body>"
                    "<h1>Main</h1><p>First <b>bold</b> para.</p><script>x()</script>"
                    "<h2>Sub</h2><ul><li>one</li><li>two</li></ul></body></html>")
    doc = read_document(path, limit=1 << 20)
    assert doc.text == "# Main\n\nFirst bold para.\n\n## Sub\n\none\ntwo\n"


def test_bad_utf8_is_replaced_and_counted_and_binary_refused(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes(b"caf\xe9 and cr\xe8me\n")
    doc = read_document(path, limit=100)
    assert (doc.text, doc.replaced) == ("caf\ufffd and cr\ufffdme\n", 2)
    noise = tmp_path / "noise"
    noise.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(NotText, match="binary"):
        read_document(noise, limit=10_000)
