"""Device profiles shipped with edgetune (TOML data files; see edgetune.profiles)."""
