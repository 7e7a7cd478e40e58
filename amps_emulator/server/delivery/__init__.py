"""Getting a message to subscribers: fan-out, acks, bookmark replay, conflation, pagination and
aggregated subscriptions."""
