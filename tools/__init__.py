"""The build tooling of the book (build, engines, environments): scripts run as
``python tools/NAME.py``, importable as ``tools.NAME`` by the book's machinery and the tests
(never by the library, which must not depend on them; tests/test_layering.py).
"""
