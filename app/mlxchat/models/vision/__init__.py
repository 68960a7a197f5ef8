"""Vision-language models, driven as the engine drives a text one.

``load`` loads a folder through mlx-vlm and wraps it in ``model.VisionChat``;
``images`` checks, decodes and keys an image file; ``family`` is the one
interface a family implements, each family a module (``qwen``: Qwen2-VL and
Qwen2.5-VL, ``qwen3``: Qwen3-VL, ``gemma3``, ``smolvlm``: SmolVLM and
Idefics3, ``mistral3``); ``features`` keeps projected features on disk.

Imports the models package's root module ``errors``, never ``gguf`` or ``testing``.
"""
