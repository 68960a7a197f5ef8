"""Speculative decoding: the token streams a turn decodes from (``streams``:
plain, a draft model; ``lookup``: prompt lookup), the draft model and its cache
(``drafting``), and the measured default (``auto``)."""
