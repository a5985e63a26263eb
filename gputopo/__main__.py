"""Allows ``python -m gputopo``."""

from gputopo.cli import main

raise SystemExit(main())
