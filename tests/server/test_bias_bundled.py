"""On the bundled model, where the reply is words: banning the reply's own
tokens with ``logit_bias`` at -100 gives another reply with none of them;
a frequency penalty changes a reply that repeats itself."""

from __future__ import annotations

from openai import OpenAI

from tests.server.conftest import serve

ASK = [{"role": "user", "content": "List the days of the week."}]


def test_banning_the_reply_s_own_tokens_changes_it(bundled_model, tmp_path):
    served = serve(bundled_model, tmp_path / "s.db", max_tokens=40)
    try:
        api = OpenAI(base_url=f"{served.url}/v1", api_key="unused", max_retries=0,
                     timeout=120)
        name = bundled_model.info.name
        first = api.chat.completions.create(model=name, messages=ASK, temperature=0,
                                            max_tokens=12)
        text = first.choices[0].message.content
        own = set(bundled_model.tokenizer.encode(text, add_special_tokens=False))
        assert own
        banned = api.chat.completions.create(
            model=name, messages=ASK, temperature=0, max_tokens=12,
            logit_bias={str(t): -100 for t in own})
        other = banned.choices[0].message.content
        assert other and other != text
        ids = set(bundled_model.tokenizer.encode(other, add_special_tokens=False))
        assert not ids & own, (text, other)
        # A list repeats its newlines and full stops: penalised, it cannot.
        plain = api.chat.completions.create(model=name, messages=ASK, temperature=0,
                                            max_tokens=40).choices[0].message.content
        penalised = api.chat.completions.create(
            model=name, messages=ASK, temperature=0, max_tokens=40, frequency_penalty=2.0,
            presence_penalty=2.0).choices[0].message.content
        assert penalised != plain and plain.count("\n") > penalised.count("\n")
    finally:
        served.stop()
