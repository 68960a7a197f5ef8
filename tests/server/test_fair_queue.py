"""Through the real server: one client's requests queued behind its own long
reply go after another conversation's request that arrived later (the
lane's fairness, keyed by the session a request names or its first message)."""

from __future__ import annotations

import threading

from tests.server.conftest import request
from tests.waiting import until


def test_a_second_conversation_goes_before_the_first_ones_queued_requests(served):
    done: list[str] = []
    replies: dict[str, int] = {}

    def ask(name: str, session: str, text: str, max_tokens: int) -> None:
        got = request(served.url, "POST", "/v1/chat/completions",
                      {"model": "tiny", "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": text}]},
                      headers={"X-Session": session})
        replies[name] = got.status
        done.append(name)

    compute, lane = served.conv.engine.compute, served.service.lane
    ticket = compute.acquire("chat")  # the first request holds the lane, waiting to compute
    threads = []
    try:
        for n, (name, session) in enumerate((("hog 1", "hog"), ("hog 2", "hog"),
                                             ("hog 3", "hog"), ("quick", "quick"))):
            threads.append(threading.Thread(
                target=ask, args=(name, session, f"{name}: tell me a long story.",
                                  4 if name == "quick" else 32)))
            threads[-1].start()
            # Each in its place before the next: the first running, the others waiting.
            until(lambda n=n: lane.waiting == n and lane.running == 1)
    finally:
        compute.release(ticket)
    for t in threads:
        t.join(60)
    assert replies == {"hog 1": 200, "hog 2": 200, "hog 3": 200, "quick": 200}
    assert done == ["hog 1", "quick", "hog 2", "hog 3"]
