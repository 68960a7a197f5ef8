"""A paragraph of plain English, for perplexity figures of the bundled model
(bench/gguf_figures.py measures on all of it, its test on the first tokens)."""

PROSE = (
    "Paris is the capital and most populous city of France. It is located on the Seine "
    "river, in the north of the country. The city is known for its museums and "
    "architecture, including the Eiffel Tower and the Louvre, which is the most visited "
    "art museum in the world. Paris is also a major centre of finance, diplomacy, "
    "commerce, fashion and science, and it is home to many universities and research "
    "institutions. About two million people live in the city itself."
)
