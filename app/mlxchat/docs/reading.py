"""A file's text for indexing: which kind it is, its bytes through the bounded
reader, decoded (bad UTF-8 replaced and counted); HTML as text, PDF through pypdf."""

from __future__ import annotations

import io
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from mlxchat.docs.errors import DocsError
from mlxchat.files import HEAD_BYTES, read_head, read_limited

MARKDOWN = {".md", ".markdown", ".mdx"}
RST = {".rst", ".rest"}
HTML = {".html", ".htm", ".xhtml"}
TEXT = {".txt", ".text", ".log", ".csv", ".tsv", ".org", ".tex", ".adoc", ".cfg", ".ini",
        ".toml", ".yaml", ".yml", ".json", ".xml", ".svg"}
CODE = {".py", ".pyi", ".js", ".mjs", ".ts", ".tsx", ".jsx", ".c", ".h", ".cc", ".cpp",
        ".hpp", ".cxx", ".rs", ".go", ".java", ".kt", ".swift", ".rb", ".php", ".cs", ".sh",
        ".bash", ".zsh", ".fish", ".lua", ".scala", ".m", ".mm", ".r", ".jl", ".sql", ".css",
        ".scss", ".vue", ".svelte", ".el", ".clj", ".hs", ".ml", ".ex", ".exs", ".erl",
        ".zig", ".nim", ".dart", ".pl", ".ps1", ".bat", ".cmake", ".mk", ".proto", ".tf"}
CODE_NAMES = {"Makefile", "Dockerfile", "CMakeLists.txt", "Rakefile", "Justfile"}
BINARY = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".bmp", ".tiff", ".zip", ".gz",
          ".tgz", ".bz2", ".xz", ".zst", ".7z", ".rar", ".tar", ".so", ".dylib", ".dll",
          ".o", ".a", ".pyc", ".whl", ".exe", ".bin", ".safetensors", ".gguf", ".npy", ".npz",
          ".mp3", ".mp4", ".wav", ".flac", ".mov", ".avi", ".mkv", ".woff", ".woff2", ".ttf",
          ".otf", ".sqlite", ".db", ".class", ".jar", ".docx", ".xlsx", ".pptx", ".odt"}


class NotText(DocsError):
    """A file that is skipped: binary, or a kind that cannot be read as text."""


@dataclass(frozen=True)
class Document:
    text: str
    kind: str
    """How to chunk it: markdown, rst, code or text (HTML and PDF become markdown)."""
    replaced: int
    """Characters that were not valid UTF-8 and were replaced."""


def kind_of(path: Path) -> str | None:
    """The kind by name: markdown, rst, html, pdf, code, text; None to sniff; 'binary'."""
    suffix = path.suffix.lower()
    if path.name in CODE_NAMES or suffix in CODE:
        return "code"
    for kind, suffixes in (("markdown", MARKDOWN), ("rst", RST), ("html", HTML),
                           ("text", TEXT), ("binary", BINARY)):
        if suffix in suffixes:
            return kind
    return "pdf" if suffix == ".pdf" else None


def decode(data: bytes) -> tuple[str, int]:
    """UTF-8 text (a BOM dropped) and how many characters were replaced."""
    try:
        return data.decode("utf-8-sig"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8-sig", errors="replace")
        return text, text.count("\ufffd") - data.count("\ufffd".encode())


def refuse_binary(path: Path) -> None:
    """NotText when the file is binary by its name or its first bytes, whatever
    its size (a file too large to read is named binary, not too large)."""
    kind = kind_of(path)
    if kind == "binary" or (kind != "pdf" and b"\0" in read_head(path, HEAD_BYTES)):
        raise NotText(f"{path} is a binary file.")


def read_document(path: Path, data: bytes | None = None, *, limit: int) -> Document:
    """The text of a file to index, or NotText / FileRefused (too large, unreadable)."""
    kind = kind_of(path)
    if kind == "binary":
        raise NotText(f"{path} is a binary file.")
    if data is None:
        data = read_limited(path, limit)
    if kind == "pdf":
        return Document(pdf_text(path, data), "markdown", 0)
    if b"\0" in data[:HEAD_BYTES]:
        raise NotText(f"{path} is a binary file.")
    text, replaced = decode(data)
    if replaced > max(8, len(text) // 10):  # mostly not text: binary without NULs
        raise NotText(f"{path} is a binary file.")
    if kind == "html":
        return Document(html_text(text), "markdown", replaced)
    return Document(text, kind or "text", replaced)


def pdf_text(path: Path, data: bytes) -> str:
    """The text of each page under a '# Page N' heading; a PDF that cannot be read
    (damaged, or encrypted with a password) is named in a DocsError."""
    import pypdf  # only when a PDF is met: it takes a while to import

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocsError(f"{path} is an encrypted PDF (it needs a password); skipped.")
        pages = [f"# Page {n}\n\n{(page.extract_text() or '').strip()}\n"
                 for n, page in enumerate(reader.pages, 1)]
    except DocsError:
        raise
    except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds on a bad file
        raise DocsError(f"{path} is not a readable PDF ({' '.join(str(exc).split())[:120]}).") \
            from None
    return "\n".join(pages)


class _HtmlText(HTMLParser):
    """Visible text; headings as Markdown headings, blocks on their own lines."""

    BLOCKS = {"p", "div", "br", "li", "tr", "pre", "section", "article", "table", "ul", "ol",
              "blockquote", "header", "footer", "main", "nav", "hr", "dd", "dt"}
    HIDDEN = {"script", "style", "head", "template", "noscript"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs) -> None:
        if tag in self.HIDDEN:
            self.hidden += 1
        elif len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self.BLOCKS:
            self.parts.append("\n\n" if tag == "p" else "\n")

    def handle_endtag(self, tag) -> None:
        if tag in self.HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif (len(tag) == 2 and tag[0] == "h" and tag[1] in "123456") or tag in self.BLOCKS:
            self.parts.append("" if tag == "li" else "\n\n")

    def handle_data(self, data) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.parts).split("\n")]
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip() + "\n"
