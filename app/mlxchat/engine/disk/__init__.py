"""The KV cache on disk: a turn's segment written (``segments``), a segment
file read (``segment_file``), a branch restored from its files
(``branch_restore``) or joined into one (``joiner``), old whole-cache snapshots
read (``snapshot``), the checks every cache file passes (``checks``), pinned
prefixes checkpointed (``prefix``), and the engine's side of it all (``disk_cache``)."""
