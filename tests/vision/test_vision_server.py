"""Images through the API: OpenAI image_url parts (data URLs; http(s) only
with --allow-image-urls) and Ollama's images; the image's tokens are reused
across requests and counted in cached_tokens; bad ones are a 400, nothing kept."""

from __future__ import annotations

import base64
import http.server
import threading
from pathlib import Path

import pytest

from mlxchat import paths

from tests.server.conftest import request
from tests.server.image_hosts import ImageHosts
from tests.waiting import until

from .served import ask_about_image, data_url, follow_up_reuses_it, openai, serve, serving
from .test_bad_images import png_header_only


def test_openai_image_parts_are_reused_across_requests(tiny_vl, tmp_path, shot):
    with serving(tiny_vl, tmp_path / "s.db") as served:
        asked = ask_about_image(served, shot)
        assert asked.usage["prompt_tokens_details"]["cached_tokens"] == 0
        stored = served.conv.store.get_session(served.conv.session.id).messages
        assert len(stored[0].images) == 1 and list(paths.images_dir().iterdir())
        # The whole first exchange, its 8 image tokens with it, came from the cache.
        follow_up_reuses_it(served, asked)


def test_http_image_urls_are_refused_unless_allowed(tiny_vl, tmp_path, shot):
    with serving(tiny_vl, tmp_path / "s.db") as served:
        body = openai([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/x.png"}},
            {"type": "text", "text": "Look"}]}])
        got = request(served.url, "POST", "/v1/chat/completions", body)
        assert got.status == 400
        error = got.json()["error"]
        assert error["param"] == "messages[0].content[0]"
        assert "--allow-image-urls" in error["message"]
        assert served.conv.store.list_sessions() == [] or not served.conv.messages


def test_an_allowed_image_url_is_fetched(tiny_vl, tmp_path, shot):
    (tmp_path / "pub").mkdir()
    (tmp_path / "pub" / "x.png").write_bytes(shot)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path / "pub"), **kw)

        def log_message(self, *args):
            pass

    files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    served = serve(tiny_vl, tmp_path / "s.db", allow_image_urls=True)
    try:
        url = f"http://127.0.0.1:{files.server_address[1]}/x.png"
        got = request(served.url, "POST", "/v1/chat/completions", openai([
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "Look"}]}]))
        assert got.status == 200, got.body
        (image,) = served.conv.messages[0].images
        assert Path(image.path).read_bytes() == shot
    finally:
        served.stop()
        files.shutdown()
        files.server_close()


def test_a_url_that_trickles_holds_no_other_request(tiny_vl, tmp_path):
    """While one request's image trickles in, the server answers others; the
    request ends when the image does (short of its length: a 400), nothing stored."""
    hosts = ImageHosts()
    served = serve(tiny_vl, tmp_path / "s.db", allow_image_urls=True, deadline_s=60)
    outcome: list = []
    url = hosts.url("/trickle")
    body = openai([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Look"}]}])
    waiting = threading.Thread(target=lambda: outcome.append(
        request(served.url, "POST", "/v1/chat/completions", body, timeout_s=90)))
    try:
        waiting.start()
        until(hosts.seen.trickling.is_set)
        assert request(served.url, "GET", "/v1/models", timeout_s=30).status == 200
        assert not outcome and not hosts.seen.trickle_gone.is_set()  # still fetching
        hosts.seen.stop.set()  # the image ends short of its length
        waiting.join(60)
        (got,) = outcome
        assert got.status == 400
        error = got.json()["error"]
        assert error["param"] == "messages[0].content[0]"
        assert error["code"] == "invalid_image_url" and url in error["message"]
        assert not served.conv.messages
    finally:
        hosts.close()
        served.stop()
        waiting.join(60)


def test_ollama_images(tiny_vl, tmp_path, shot):
    with serving(tiny_vl, tmp_path / "s.db") as served:
        got = request(served.url, "POST", "/api/chat", {
            "model": "tiny", "stream": False, "options": {"temperature": 0, "num_predict": 4},
            "messages": [{"role": "user", "content": "What is it?",
                          "images": [base64.b64encode(shot).decode()]}]})
        assert got.status == 200, got.body
        assert got.json()["message"]["role"] == "assistant"
        (image,) = served.conv.messages[0].images
        assert Path(image.path).read_bytes() == shot


@pytest.mark.parametrize("bomb, words", [(False, "is not an image"),
                                         (True, "claims 20,000x20,000 pixels")])
def test_a_bad_image_is_a_400_and_nothing_is_kept(tiny_vl, tmp_path, bomb, words):
    raw = b"not an image at all"
    if bomb:
        png_header_only(tmp_path / "bomb.png", 20_000, 20_000)
        raw = (tmp_path / "bomb.png").read_bytes()
    with serving(tiny_vl, tmp_path / "s.db") as served:
        got = request(served.url, "POST", "/v1/chat/completions", openai([
            {"role": "user", "content": [{"type": "image_url",
                                          "image_url": {"url": data_url(raw)}}]}]))
        assert got.status == 400
        error = got.json()["error"]
        assert words in error["message"] and "\n" not in error["message"]
        assert error["param"] == "messages[0].content[0]"
        assert not paths.images_dir().exists() or not list(paths.images_dir().iterdir())
        assert all(not s.message_count for s in served.conv.store.list_sessions())


def test_a_text_model_refuses_images_over_the_api(tiny, tmp_path, shot):
    with serving(tiny, tmp_path / "s.db") as served:
        got = request(served.url, "POST", "/v1/chat/completions", openai([
            {"role": "user", "content": [{"type": "image_url",
                                          "image_url": {"url": data_url(shot)}}]}]))
        assert got.status == 400 and "sees no images" in got.json()["error"]["message"]
        assert not paths.images_dir().exists()
