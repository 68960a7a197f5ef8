"""Document collections for retrieval: walking and reading files, chunks that
keep their place, MLX embeddings, incremental indexing and hybrid search.

Core layer: imports the store (its tables in store/documents.py) and the
ground floor; never Textual. The store keeps only bytes, so numpy and mlx
stay here.
"""

from mlxchat.docs.chunking import Chunk, ChunkSizes, chunk_text
from mlxchat.docs.errors import DocsError
from mlxchat.docs.index_progress import IndexProgress, IndexReport
from mlxchat.docs.indexer import Indexer
from mlxchat.docs.search import Hit, Retriever

__all__ = ["Chunk", "ChunkSizes", "DocsError", "Hit", "IndexProgress", "IndexReport",
           "Indexer", "Retriever", "chunk_text"]
