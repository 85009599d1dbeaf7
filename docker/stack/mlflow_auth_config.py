"""Write the config file of MLflow's basic-auth app: ``mlflow_auth_config.py PATH``.

The user store's database URI (with its password) comes from ``MLFLOW_AUTH_DATABASE_URI``, so it is
never on a command line; the admin user and password come from ``MLFLOW_AUTH_ADMIN_USERNAME`` /
``MLFLOW_AUTH_ADMIN_PASSWORD``, which MLflow reads itself. The file is readable by its owner only.
"""

from __future__ import annotations

import configparser
import os
import sys


def main(path: str) -> int:
    config = configparser.ConfigParser(interpolation=None)
    config["mlflow"] = {
        # what a user MLflow's API creates may do with what others made; the admin may do everything
        "default_permission": "READ",
        "database_uri": os.environ["MLFLOW_AUTH_DATABASE_URI"],
        "authorization_function": "mlflow.server.auth:authenticate_request_basic_auth",
        "grant_default_workspace_access": "false",
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        config.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
