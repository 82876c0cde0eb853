"""Settings for the whole suite.

The suite runs in a non-UTC local time zone (Asia/Kathmandu, UTC+05:45, an offset that
is not a whole hour) so that a backend or helper that reads or writes local time, or
drops an offset, shows up as a wrong instant instead of passing by luck on a UTC box.
"""

from __future__ import annotations

import os
import time

os.environ["TZ"] = "Asia/Kathmandu"
time.tzset()
