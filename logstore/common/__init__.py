"""Building blocks with no Kafka concept of their own: fsync, bounded LRU maps, worker pools."""
