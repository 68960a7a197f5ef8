"""The engine's one thread: every MLX job of an engine runs on it, in order,
under the process's compute lock (engines over one model take turns)."""
