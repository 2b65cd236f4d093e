"""Kind `redis`: a Redis master and its replica (Pika, which speaks the same protocol, reuses the keyspace audit)."""
