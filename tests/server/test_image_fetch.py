"""An allowed image URL (``serve --allow-image-urls``) is fetched with one
deadline for the whole request, a size cap enforced while reading, and
redirects followed only to http(s), a bounded number: each against small
HTTP servers on 127.0.0.1 (``image_hosts``)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from mlxchat.server.core import fetch_guard
from mlxchat.server.core.api_turns import ApiRequest, IncomingMessage
from mlxchat.server.core.errors import ApiError
from mlxchat.server.core.image_fetch import FetchLimits, fetch_images
from mlxchat.server.core.images import ImageBlob

from tests.server.image_hosts import GOOD, ImageHosts
from tests.waiting import until


@pytest.fixture
def hosts():
    running = ImageHosts()
    yield running
    running.close()


def _turn(*urls: str) -> ApiRequest:
    blobs = tuple(ImageBlob(b"", f"messages[0].content[{n}]", url) for n, url in enumerate(urls))
    return ApiRequest(None, [IncomingMessage("user", "look", images=blobs)])


LOCAL = FetchLimits(private=True)
"""The hosts are on 127.0.0.1: reached only where private addresses are allowed."""


def _fetch(turn: ApiRequest, limits: FetchLimits = LOCAL, *, sees: bool = True
           ) -> ApiRequest:
    return asyncio.run(fetch_images(turn, limits, sees=sees, model="m"))


def _refusal(turn: ApiRequest, limits: FetchLimits = LOCAL, **kw) -> ApiError:
    with pytest.raises(ApiError) as caught:
        _fetch(turn, limits, **kw)
    error = caught.value
    assert error.status == 400 and error.param.startswith("messages[0].content[")
    return error


def test_a_good_image_is_fetched_once_and_signed_by_its_bytes(hosts):
    turn = _fetch(_turn(hosts.url("/good.png"), hosts.url("/relative"),
                        hosts.url("/good.png")))
    (message,) = turn.messages
    assert [b.data for b in message.images] == [GOOD] * 3
    assert all(b.url is None for b in message.images)
    digest = hashlib.sha256(GOOD).hexdigest()
    assert message.signature == f"\0image:{digest}" * 3
    assert hosts.seen.hits == {"good.png": 2, "relative": 1}  # the same URL once


def test_a_trickling_server_is_cut_at_the_whole_request_deadline(hosts):
    error = _refusal(_turn(hosts.url("/trickle")), FetchLimits(deadline_s=0.5, private=True))
    assert error.code == "invalid_image_url"
    assert error.message == ("The image could not be fetched: "
                             f"{hosts.url('/trickle')} did not arrive within 0.5 s.")
    assert hosts.seen.trickling.is_set()
    until(hosts.seen.trickle_gone.is_set)  # the fetch let go of the connection


def test_a_redirect_to_ftp_is_not_followed(hosts):
    error = _refusal(_turn(hosts.url("/to-ftp")))
    assert "redirects to ftp:, and only http and https are followed" in error.message
    assert hosts.seen.hits == {"to-ftp": 1}


def test_redirects_are_followed_a_bounded_number_of_times(hosts):
    error = _refusal(_turn(hosts.url("/loop/0")), FetchLimits(max_redirects=3, private=True))
    assert error.message == "The image could not be fetched: more than 3 redirects."
    assert hosts.seen.hits == {"loop": 4}


def test_the_size_cap_is_enforced_while_reading(hosts):
    """/endless never ends: the fetch returns only because it stops at the cap
    (the deadline is far off), and drops the connection."""
    limits = FetchLimits(max_bytes=200_000, deadline_s=60, private=True)
    error = _refusal(_turn(hosts.url("/endless")), limits)
    assert error.message == "The image could not be fetched: it is over 200,000 bytes."
    until(hosts.seen.endless_gone.is_set)
    declared = _refusal(_turn(hosts.url("/declared-huge")), limits)
    assert declared.message == error.message  # from its Content-Length, before any byte


def test_other_failures_are_one_line_each(hosts):
    assert "answered 404" in _refusal(_turn(hosts.url("/missing"))).message
    assert "sent it compressed (gzip)" in _refusal(_turn(hosts.url("/gzip"))).message
    gone = _refusal(_turn("http://127.0.0.1:9/x.png")).message  # nothing listens on port 9
    assert gone.startswith("The image could not be fetched: http://127.0.0.1:9/x.png: ")
    assert "\n" not in gone


def test_nothing_is_fetched_for_a_model_that_sees_no_images_or_past_the_url_cap(hosts):
    blind = _refusal(_turn(hosts.url("/good.png")), sees=False)
    assert "m sees no images" in blind.message
    many = _refusal(_turn(*[hosts.url(f"/good.png?{n}") for n in range(5)]),
                    FetchLimits(max_urls=4, private=True))
    assert many.param == "messages[0].content[4]" and "at most 4 image URLs" in many.message
    assert hosts.seen.hits == {}


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_private_address_is_refused_unless_allowed(hosts, host):
    """By default (``--allow-image-urls`` alone) a URL reaching this machine is
    refused before anything is sent to it."""
    url = hosts.url("/good.png").replace("127.0.0.1", host)
    error = _refusal(_turn(url), FetchLimits())
    assert error.code == "invalid_image_url"
    assert error.message.startswith(f"The image could not be fetched: {url}: {host} is a "
                                    "private address (")
    assert "serve --allow-private-image-urls allows them" in error.message
    assert hosts.seen.hits == {}


@pytest.mark.parametrize("address,private", [
    ("127.0.0.1", True), ("10.1.2.3", True), ("192.168.1.10", True), ("172.16.0.5", True),
    ("169.254.169.254", True), ("0.0.0.0", True), ("100.64.0.1", True), ("224.0.0.251", True),
    ("::1", True), ("fe80::1%2", True), ("fc00::1", True), ("::ffff:127.0.0.1", True),
    ("::ffff:10.0.0.1", True), ("ff02::1", True),
    ("8.8.8.8", False), ("1.1.1.1", False), ("2606:4700:4700::1111", False),
    ("::ffff:8.8.8.8", False)])
def test_which_addresses_are_not_public(address, private):
    assert fetch_guard.not_public(address) is private
