"""The tool host against real MCP servers (the SDK's MCPServer) over stdio and
streamable HTTP: tools listed with the server's hints, calls that reach the
server, the environment a server gets, and every fault a server can have,
each one line with the host still working afterwards."""

from __future__ import annotations

import os
import sys
import time

import pytest

from mlxchat.tools.config import BASE_ENV
from mlxchat.tools.host import ToolHost

from .servers import children, config_of, entry, host_for, http_server, ran, wait_gone


@pytest.fixture(scope="module")
def markers(tmp_path_factory):
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def host(markers, tmp_path_factory):
    os.environ["MLXCHAT_TEST_NOT_NAMED"] = "a secret the server must not see"
    try:
        running = host_for(markers, tmp_path_factory.mktemp("logs"),
                           **{"t": entry(markers, env={"NAMED": "${MLXCHAT_TEST_UNSET:-yes}"})})
    finally:
        del os.environ["MLXCHAT_TEST_NOT_NAMED"]
    yield running
    running.close()


def test_a_stdio_server_lists_its_tools_with_the_servers_hints(host):
    (status,) = host.statuses()
    assert status.state == "ready" and status.start_s is not None
    tools = {t.name: t for t in host.tools(["t"])}
    assert {"get_weather", "write_note", "broken", "slow", "big", "crash"} <= set(tools)
    assert tools["get_weather"].hints() == ["read-only"]
    assert tools["write_note"].hints() == ["may change or delete things"]
    assert tools["get_weather"].input_schema["required"] == ["city"]


def test_a_call_reaches_the_server_and_comes_back_as_text(host, markers):
    result = host.call("t", "get_weather", {"city": "Oslo"}, timeout_s=30)
    assert (result.text, result.is_error) == ("Sunny in Oslo, 21 C", False)
    assert ran(markers, "get_weather") == ["Oslo"]


def test_a_server_sees_only_the_variables_its_entry_names(host):
    names = host.call("t", "environment", {}, timeout_s=30).text.split(",")
    assert set(names) == {"NAMED", *(v for v in BASE_ENV if v in os.environ)}


def test_an_error_non_text_content_and_a_hang_are_each_one_line(host):
    broken = host.call("t", "broken", {}, timeout_s=30)
    assert broken.is_error and broken.note.startswith("the tool reported an error")
    picture = host.call("t", "picture", {}, timeout_s=30)
    assert picture.text.startswith("a red square") and "image/png" in picture.note
    assert "not shown to the model" in picture.text
    started = time.monotonic()
    slow = host.call("t", "slow", {"seconds": 20}, timeout_s=0.5)
    assert slow.is_error and slow.note == "no result within 0.5 s (tool_timeout)"
    assert time.monotonic() - started < 5
    assert host.call("t", "get_weather", {"city": "Rome"}, timeout_s=30).text.endswith("21 C")


def test_a_50_mb_result_is_cut_before_it_is_read(host):
    started = time.monotonic()
    result = host.call("t", "big", {"megabytes": 50}, timeout_s=120)
    assert not result.is_error
    assert result.size_bytes > 50e6 and len(result.text) < 1.1e6
    assert "all but the first 1.0 MB of a 104.9 MB message" in result.note  # text + structured
    assert time.monotonic() - started < 60  # the SDK alone took minutes for such a line


def test_a_server_that_exits_is_said_and_started_again_when_needed(host):
    gone = host.call("t", "crash", {}, timeout_s=30)
    assert gone.is_error and gone.note.startswith("the server exited")
    assert host.statuses()[0].state == "exited"
    assert host.tools(["t"]) == []
    assert host.start(["t"]) == ["t"]
    host.wait(["t"], timeout_s=60)
    assert host.call("t", "get_weather", {"city": "Bern"}, timeout_s=30).text.endswith("21 C")


def test_servers_that_fail_to_start_say_why_in_one_line(tmp_path):
    quiet = ["-c", "import sys; sys.stderr.write('no API key found\\n'); sys.exit(2)"]
    # The two that fail by themselves get all the time they need (a loaded
    # machine starts Python slowly); only the one that hangs meets the timeout.
    host = ToolHost(config_of({
        "missing": {"command": "mlxchat-no-such-program"},
        "exits": {"command": sys.executable, "args": quiet},
    }), log_dir=tmp_path, start_timeout_s=120)
    hanging = ToolHost(config_of({
        "hangs": {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]},
    }), log_dir=tmp_path / "hangs", start_timeout_s=1)
    try:
        host.start(["missing", "exits"])
        hanging.start(["hangs"])
        host.wait(["missing", "exits"])
        hanging.wait(["hangs"])
        why = {s.name: (s.state, s.why) for s in host.statuses() + hanging.statuses()}
        assert why["missing"][0] == "failed" and "cannot start mlxchat-no-such-program" \
            in why["missing"][1]
        assert why["exits"][0] == "failed" and "no API key found" in why["exits"][1]
        assert why["hangs"] == ("failed", "did not start within 1 s")
        assert "\n" not in "".join(w for _, w in why.values())
        assert host.call("exits", "x", {}, timeout_s=1).note == \
            "the MCP server exits is not running"
    finally:
        host.close()
        hanging.close()


def test_a_streamable_http_server_on_loopback(markers, tmp_path):
    with http_server(markers) as url:
        host = ToolHost(config_of({"web": {"url": url}}), log_dir=tmp_path)
        try:
            host.start(["web"])
            host.wait(["web"], timeout_s=60)
            assert host.statuses()[0].state == "ready", host.statuses()
            result = host.call("web", "get_weather", {"city": "Lima"}, timeout_s=30)
            assert result.text == "Sunny in Lima, 21 C"
            assert "Lima" in ran(markers, "get_weather")
        finally:
            host.close()


def test_closing_the_host_leaves_no_process_behind(markers, tmp_path):
    before = set(children(os.getpid()))
    host = host_for(markers, tmp_path)
    relays = [p for p in children(os.getpid()) if p not in before]
    servers = [p for r in relays for p in children(r)]
    assert relays and servers
    started = time.monotonic()
    host.close()
    assert time.monotonic() - started < 8
    assert wait_gone(relays + servers) == []
