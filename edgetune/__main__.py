"""``python -m edgetune``."""

from .cli.main import main

main()
