"""The vocabulary every layer of the server shares: Protocols, routing, the clock, heartbeats,
the end of a turn and the version. Imports nothing else of the server."""
