"""What runs inside a job: the script every service starts, the stage bodies and the rank entries.

``job_script.py`` is uploaded as it is (the adapters in ``engines/`` read it as package data); it
hands over to :func:`entry.main`, which runs a Spark stage (``stages``, with its re-run decision in
``rerun_check``), one training rank (``train_entry``) or a Ray Train driver (``ray_driver``). The
same code runs the local engine. No Airflow here.
"""
