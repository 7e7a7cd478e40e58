"""Where a SOW topic's records live: the backend interface, the memory backend and its tables,
and the LMDB environment, tables, keys and scans of the persistent backend."""
