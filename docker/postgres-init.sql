-- MLflow's tracking store lives next to Airflow's metadata database, owned by the same role.
CREATE DATABASE mlflow OWNER airflow;
