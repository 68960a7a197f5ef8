"""Continuous batching: several engines' replies decoded together, one
forward pass a step, each member with its own cache, sampler and stop
conditions (``decoder.BatchDecoder``, ``stream.batched_stream``)."""
