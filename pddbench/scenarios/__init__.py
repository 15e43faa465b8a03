"""Built-in scenarios (TOML package data), shared by `pddbench replay` and `pddbench serve`."""
