"""The conversation layer: one open session driving one engine.

``Conversation`` (conversation.py) is its face: the turn and which session is
open are its own, and it hands out its parts (``conv.saved``, ``conv.cache``,
``conv.pins``, ``conv.typing``, ``conv.speculation``, ``conv.views``,
``conv.turns``, ``conv.locks``, ``conv.retrieval``), one module each beside it.
``root.open_conversation`` is the one place that builds store + model + engine
+ Conversation. Nothing is handed on from here: import a name from the module
that defines it.
"""
