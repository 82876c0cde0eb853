"""``python -m convostore``."""

from convostore.cli import main

raise SystemExit(main())
