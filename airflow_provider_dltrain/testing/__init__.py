"""Test your cloud DAGs offline: a fake AWS whose Glue, EMR, EMR Serverless, SageMaker and EC2 jobs run locally.

``pip install 'airflow-provider-dltrain[testing]'``, then either the ``dltrain fake-aws`` command or the
pytest fixtures of :mod:`airflow_provider_dltrain.testing.pytest_plugin` (``fake_aws``, loaded by the
``pytest11`` entry point). moto is needed only here; nothing else in the provider imports this package.
"""
