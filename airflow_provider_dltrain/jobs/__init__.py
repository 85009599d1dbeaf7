"""What runs inside a job: the script every service starts, the stage bodies and the rank entries.

``job_script.py`` is uploaded as it is (the adapters in ``engines/`` read it as package data); it
hands over to :func:`entry.main`, which runs a Spark stage (``stages``), one training rank
(``train_entry``) or a Ray Train driver (``ray_driver``). The same code runs the local engine. No
Airflow here. Whether a stage needs to run at all is decided before it is submitted, by the
operator, with :mod:`airflow_provider_dltrain.etl.rerun_check`.
"""
