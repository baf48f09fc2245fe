"""The command groups of ``attnphase``; each module's ``register(subparsers)`` adds its commands."""
