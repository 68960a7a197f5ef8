"""Ollama's wire protocol: /api/chat and /api/tags."""
