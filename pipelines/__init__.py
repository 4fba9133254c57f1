"""gpupipe pipelines: the config schema, the pure pipeline factory and the CLI."""
