"""A model split over several MLX ranks: rank 0's side (``split``), the other
ranks' loop (``rank_worker``), the messages between them (``channel``) and
each rank's share of a KV segment (``rank_files``)."""
