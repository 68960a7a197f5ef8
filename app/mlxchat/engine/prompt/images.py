"""Images in a prompt: the placeholder a chat template writes for each image
becomes that image's span of tokens (its key, once per token it takes), and
a model that sees no images refuses one in a line."""

from __future__ import annotations

from typing import Sequence

from mlxchat.chat import ImageRef, Message
from mlxchat.engine.events import EngineError
from mlxchat.models import LoadedModel


class ImagesRefused(EngineError):
    """A message shows images to a model that sees none."""


def images_of(messages: Sequence[Message]) -> list[ImageRef]:
    """Every image the messages show, in the order the template writes them."""
    return [ref for m in messages for ref in m.images]


def check_sees(loaded: LoadedModel, refs: Sequence[ImageRef]) -> None:
    if refs and not loaded.info.sees_images:
        raise ImagesRefused(f"{loaded.info.name} sees no images; pick a vision-language "
                            "model (/model) or send the text alone")


def expand(loaded: LoadedModel, ids: Sequence[int], refs: Sequence[ImageRef]) -> list[int]:
    """``ids`` rendered by the template with each image placeholder replaced
    by its image's span; ``ids`` as they are when there are no images."""
    if not refs:
        return list(ids)
    check_sees(loaded, refs)
    return loaded.model.expand(ids, refs)


def know(loaded: LoadedModel, messages: Sequence[Message]) -> None:
    """Make every image the messages show known to the model (from its file's
    header: the grid its span takes), so a prompt of stored token ids (the
    ledger) places and, where no cache holds them, computes them."""
    refs = images_of(messages)
    if refs:
        check_sees(loaded, refs)
        loaded.model.know(refs)
