"""Bytes to commands for one client: the connection, and the framings in front of it (WebSocket,
the legacy fix/nvfix/xml headers)."""
