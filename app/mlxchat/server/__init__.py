"""`mlxchat serve`: an OpenAI- and Ollama-compatible HTTP server over one
conversation and one engine (see ``app``, ``service``, ``lane``)."""
