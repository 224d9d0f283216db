"""Placeholder, filled by its issue."""


def register(app):
    pass
