"""Tools from Model Context Protocol servers: their configuration (``mcp.json``),
a host that runs the SDK's clients on an event loop of its own, the tools'
definitions as the chat template takes them, and what a call returns, cut to
a token budget.

Core layer: imports the ground floor only (the SDK is imported lazily, on
the host's thread, so a session without tools never pays for it).
"""
