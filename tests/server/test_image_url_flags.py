"""`serve --allow-image-urls` fetches from public addresses only;
`--allow-private-image-urls` reaches this machine and the LAN too (and implies
the first)."""

from __future__ import annotations

from mlxchat.cli.main import build_parser
from mlxchat.cli.serve import serve_options
from mlxchat.server.app import image_limits


def _options(*flags: str):
    return serve_options(build_parser().parse_args(["serve", *flags]), warn=lambda _: None)


def test_image_urls_are_refused_by_default():
    options = _options()
    assert not options.allow_image_urls and not image_limits(options).private


def test_allowed_image_urls_reach_public_addresses_only():
    options = _options("--allow-image-urls")
    assert options.allow_image_urls and not image_limits(options).private


def test_private_image_urls_imply_allowed_ones():
    options = _options("--allow-private-image-urls")
    assert options.allow_image_urls and image_limits(options).private
