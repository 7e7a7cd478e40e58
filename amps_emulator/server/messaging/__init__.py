"""The broker state the handlers receive, the one message path, runs of plain publishes and the
registration of live subscriptions."""
