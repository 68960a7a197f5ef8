"""Anthropic's wire protocol: the Messages API."""
