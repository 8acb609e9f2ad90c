"""The test kit's own tests use its pytest plugin's fixtures."""

pytest_plugins = ["statecharts.testing.plugin"]
