"""The Spark source `format("logstore")`: readStream per consumer group, batch reads.

Depends on the core (`logstore`); the core never imports it.
"""
