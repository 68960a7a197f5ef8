"""`mlxchat serve`: an HTTP server over one model, speaking several wire
protocols. `app` builds the ASGI app from each protocol's routes (`openai/`,
`anthropic/`, `ollama/`, each with an `api_router.py`); they share `core/`
(the chat service, its lane and slots, streaming, errors)."""
