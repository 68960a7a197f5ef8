"""OpenAI's wire protocol: chat completions, completions, models."""
