-- First start only: one login role per service, each owning only its own databases (Postgres'
-- superuser stays with the postgres service). The passwords come from the environment (psql 15+'s
-- \getenv), never from this file or a command line.
\getenv airflow_password AIRFLOW_DB_PASSWORD
\getenv mlflow_password MLFLOW_DB_PASSWORD
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
-- MLflow's runs and registry, and the users of its basic-auth app
CREATE ROLE mlflow LOGIN PASSWORD :'mlflow_password';
CREATE DATABASE mlflow OWNER mlflow;
CREATE DATABASE mlflow_auth OWNER mlflow;
-- nobody but the owner connects to a database (the default lets every role connect to every one)
REVOKE CONNECT ON DATABASE airflow, mlflow, mlflow_auth FROM PUBLIC;
