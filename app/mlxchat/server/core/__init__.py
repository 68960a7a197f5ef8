"""What every protocol of the server shares: the chat service over the engine,
its lane and slots, admission, streaming, errors, and the request parsing the
protocols have in common. Imports no protocol."""
