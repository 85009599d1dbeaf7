"""``python -m airflow_provider_dltrain`` is the ``dltrain`` command."""

from __future__ import annotations

import sys

from airflow_provider_dltrain.cli import main

sys.exit(main())
