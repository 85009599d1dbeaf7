"""``python -m airflow_provider_dltrain.training.horovod_main JOB_FILE``: one Horovod rank.

What ``horovodrun`` (or ``mpirun``) starts in every process; a module of its own because the
package already imports :mod:`~airflow_provider_dltrain.training.horovod_backend`.
"""

from __future__ import annotations

import sys

from airflow_provider_dltrain.training.horovod_backend import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
