"""The MLflow tracking store as every stage reads it: connection settings, the client, model versions,
the champion for a date, model resolution and the model-file formats. No Airflow here.

Below training, inference and the promotion gate (:mod:`airflow_provider_dltrain.registry`), which all
read the store; it imports nothing of them. ``airflow_provider_dltrain.registry`` keeps re-exporting
the public names, and the old module paths ``registry.config``, ``registry.client``, ``registry.models``,
``registry.loading``, ``registry.gate`` and ``registry.resolve`` still import (the same modules), with a
``DeprecationWarning``; ``registry.champion_history`` is the function, as before.
"""
