"""Slow, obviously-correct float64 implementations that the fast code must match.

Import them as ``from reference.attention import naive_attention`` (tests/conftest.py puts
tests/ on ``sys.path``). Nothing here imports attnlab's code paths under test.
"""
