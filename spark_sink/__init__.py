"""The Spark sink `writeStream.format("logstore")`: exactly-once writes into topics.

Depends on the core (`logstore`); the core never imports it.
"""
