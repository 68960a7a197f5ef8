"""Ollama's wire protocol: /api/chat, /api/generate, the models' descriptions
(/api/tags, /api/show, /api/ps, /api/version) and embeddings."""
