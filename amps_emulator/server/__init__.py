"""The asyncio server, in layers: ``core`` (the shared vocabulary), ``net`` (bytes to commands),
``delivery`` (fan-out, acks, replay), ``messaging`` (the broker and the message path),
``services`` (transaction log, SOW, queues, views, actions, replication), ``handlers`` (one
module per command family), ``app`` (the composition root) and ``ops`` (the operator tools)."""
