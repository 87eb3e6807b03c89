"""S2 Studio: local Fish Audio S2 Pro text-to-speech. Importing this package loads nothing heavy."""

__version__ = "0.1.0"
