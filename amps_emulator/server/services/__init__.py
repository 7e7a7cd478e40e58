"""The stateful services the composition root builds: transaction log, SOW, queues, views, event
topics, log targets, actions and replication."""
