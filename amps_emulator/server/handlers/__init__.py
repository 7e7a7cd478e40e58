"""The command handlers, one module per command family, each called as ``(broker, client, cmd)``."""
