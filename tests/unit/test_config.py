"""Settings: file + environment, and remembering one value without the environment."""

from mlxchat.config import Settings, load_settings, remember, save_settings


def test_environment_overrides_the_file_but_is_never_saved(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    s = Settings()
    s.generation.temperature = 0.3
    save_settings(s, path)
    monkeypatch.setenv("MLXCHAT_MODEL", "from-env")
    assert load_settings(path).model == "from-env"
    remember("generation.max_tokens", 77, path)
    remember("theme", "nord", path)
    file_only = load_settings(path, env=False)
    assert file_only.model == "smollm2-135m"
    assert (file_only.generation.max_tokens, file_only.generation.temperature,
            file_only.theme) == (77, 0.3, "nord")


def test_bad_toml_is_one_clear_error(tmp_path):
    import pytest

    from mlxchat.config import ConfigError

    path = tmp_path / "config.toml"
    path.write_text("model = [unclosed")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path)


def test_generation_rules_are_checked_in_one_place(tmp_path):
    import pytest

    from mlxchat.config import ConfigError
    from mlxchat.generation import GenerationSettings

    GenerationSettings().check()  # the defaults are allowed
    for field, bad in [("temperature", -1.0), ("top_p", 0.0), ("min_p", 1.0), ("max_tokens", 0),
                       ("seed", -3), ("seed", "x"), ("repetition_penalty", 0.0),
                       ("kv_bits", 3), ("context_policy", "rotate"), ("temperature", float("nan")),
                       ("max_tokens", 2.5), ("temperature", True)]:
        with pytest.raises(ValueError, match=f"^{field} must be"):
            GenerationSettings(**{field: bad}).check()
    path = tmp_path / "config.toml"
    path.write_text("[generation]\ntop_p = 1.5\n")
    with pytest.raises(ConfigError, match=r"\[generation\] top_p must be > 0 and <= 1"):
        load_settings(path)
