"""The HTTP front door (FastAPI): produce with acks and group commit, fetch, topics, groups.

Depends on the core (`logstore`); the core never imports it.
"""
