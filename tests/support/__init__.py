"""What the tests of every tier share: assertions on a topic's log, a `logstore serve` child, the CLI, Spark helpers,
and the data and layouts that tests of more than one tier build.

Fixtures live in the ``conftest.py`` of the tier that uses them; these modules hold plain functions and classes,
imported by the tests (and by the child processes some tests start, with the repository on ``PYTHONPATH``).
"""
