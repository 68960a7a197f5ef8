"""Schema version 16: what tools the user let run unasked, and how each result
of a tool the app ran came to be."""

V16_TOOL_GRANTS_AND_RUNS = (
    # "Always allow" answers to a tool's consent dialog: for one session
    # (session_id, gone with it) or everywhere (NULL). A grant holds for the
    # server as it was configured then (fingerprint: its command or URL).
    """
    CREATE TABLE tool_grants (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id INTEGER REFERENCES sessions(id) ON DELETE CASCADE,
        server TEXT NOT NULL,
        tool TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created REAL NOT NULL
    )
    """,
    "CREATE UNIQUE INDEX tool_grants_one ON tool_grants(COALESCE(session_id, 0), server, tool)",
    # How a tool result the app ran came to be (JSON of chat.ToolRun).
    "ALTER TABLE messages ADD COLUMN tool_run TEXT",
)
