"""Adapters of the conformance kit to real engines: one module per engine.

Each module drives one implementation of speculative decoding through its public
interface (a function, a command line, a server), reads what it emits, and tests it with
the kit's statistics; each has a command line ``python -m
specdec.conformance.adapters.NAME`` that prints a JSON summary.
"""
