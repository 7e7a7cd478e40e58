"""The asyncio server: listeners, connections, the dispatch table, routing and the CLI."""
