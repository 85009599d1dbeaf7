"""The same stages on AWS: ETL and scoring on Glue, EMR, EMR Serverless, SageMaker Processing, one EC2
instance or any Spark cluster; training on SageMaker, an EC2 cluster or a Ray cluster; the reaper as a
teardown."""

from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_dltrain.engines.glue import GlueOptions
from airflow_provider_dltrain.operators import (
    DeltaWriteOptions,
    DltrainReapOperator,
    Ec2ClusterTeardownOperator,
    SparkBatchInferenceOperator,
    SparkToDeltaOperator,
    TrainModelOperator,
)

DS = "{{ data_interval_start | ds }}"
PINNED = {"uri": "s3://my-lake/lake/digits", "version": 12}  # in a DAG: the sensor's .output
INPUTS = {
    "images": {
        "path": "s3://my-landing/{{ data_interval_start | ds }}/images",
        "format": "binaryFile",
        "options": {"pathGlobFilter": "*.png"},
    },
    "labels": {"path": "s3://my-landing/{{ data_interval_start | ds }}/labels.csv", "format": "csv"},
}
COMMON = {
    "table_uri": "s3://my-lake/lake/digits",
    "partition": {"ds": DS},
    "transform": "my_pkg.etl:decode_digits",
}

with DAG(dag_id="docs_glue", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:glue]
    GLUE = GlueOptions(  # or a dict of the same fields; either is checked when the file is parsed
        staging_uri="s3://my-lake/dltrain-staging",
        role="arn:aws:iam::123456789012:role/DltrainGlueJob",
        worker_type="G.1X",
        number_of_workers=4,
        additional_python_modules=["deltalake==1.6.6", "tenacity>=9", "pillow"],  # + the transform's
    )

    SparkToDeltaOperator(
        task_id="ingest_images",
        table_uri="s3://my-lake/lake/digits",
        partition={"ds": "{{ data_interval_start | ds }}"},
        transform="my_pkg.etl:decode_digits",
        inputs={
            "images": {
                "path": "s3://my-landing/{{ data_interval_start | ds }}/images",
                "format": "binaryFile",
                "options": {"pathGlobFilter": "*.png"},
            },
            "labels": {"path": "s3://my-landing/{{ data_interval_start | ds }}/labels.csv", "format": "csv"},
        },
        write=DeltaWriteOptions(max_bad_fraction=0.05),
        engine="glue",
        engine_options=GLUE,
        aws_conn_id="aws_lake",
        deferrable=True,
    )
    # --8<-- [end:glue]

with DAG(dag_id="docs_emr", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:emr]
    EMR = {
        "staging_uri": "s3://my-lake/dltrain-staging",
        "job_flow": {
            "ReleaseLabel": "emr-7.5.0",
            "Applications": [{"Name": "Spark"}],
            "Instances": {
                "InstanceCount": 3,
                "MasterInstanceType": "m5.xlarge",
                "SlaveInstanceType": "m5.xlarge",
            },
            "JobFlowRole": "EMR_EC2_DefaultRole",
            "ServiceRole": "EMR_DefaultRole",
            "LogUri": "s3://my-lake/emr-logs/",
        },
        "venv_archive_uri": "s3://my-lake/envs/dltrain-venv.tar.gz",  # made with venv-pack
    }

    SparkToDeltaOperator(task_id="ingest_images", **COMMON, inputs=INPUTS, engine="emr", engine_options=EMR,
                         aws_conn_id="aws_lake")  # fmt: skip
    # --8<-- [end:emr]

with DAG(dag_id="docs_emr_serverless", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:emr_serverless]
    EMR_SERVERLESS = {
        "staging_uri": "s3://my-lake/dltrain-staging",
        "application_id": "00fabc1234567890",
        "execution_role_arn": "arn:aws:iam::123456789012:role/DltrainEmrServerlessJob",
        "venv_archive_uri": "s3://my-lake/envs/dltrain-venv.tar.gz",  # omit with a custom image
        "log_uri": "s3://my-lake/emr-serverless-logs/",
    }

    SparkBatchInferenceOperator(
        task_id="score",
        model={"name": "digits_cnn", "champion_as_of": "{{ data_interval_start | ds }}"},
        input=PINNED,
        input_filter=[["ds", "=", "{{ data_interval_start | ds }}"]],
        table_uri="s3://my-lake/lake/digit_predictions",
        partition={"ds": "{{ data_interval_start | ds }}"},
        scoring={"feature_columns": ["features"], "key_columns": ["source_file"]},
        engine="emr_serverless",
        engine_options=EMR_SERVERLESS,
        aws_conn_id="aws_lake",
        mlflow_conn_id="mlflow_default",
        deferrable=True,
    )
    # --8<-- [end:emr_serverless]

with DAG(dag_id="docs_spark_submit", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:spark_submit]
    SparkToDeltaOperator(
        task_id="ingest_images",
        **COMMON,
        inputs=INPUTS,
        engine="spark_submit",
        engine_options={
            "master": "spark://spark-master:7077",
            "staging_uri": "/shared/dltrain-staging",
            "spark_submit_args": ["--executor-memory", "4g"],
        },
    )
    # --8<-- [end:spark_submit]

with DAG(dag_id="docs_sagemaker_processing", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:sagemaker_processing]
    PROCESSING = {
        "staging_uri": "s3://my-lake/dltrain-staging",
        "role": "arn:aws:iam::123456789012:role/DltrainProcessingJob",
        # a Spark processing image whose Python (3.10+) has deltalake and pyarrow
        "image_uri": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/dltrain-spark-processing:3.5",
        "instance_type": "ml.m5.2xlarge",
        "instance_count": 2,
        "max_runtime_s": 3600,
    }

    SparkToDeltaOperator(
        task_id="ingest_images",
        **COMMON,
        inputs=INPUTS,
        engine="sagemaker_processing",
        engine_options=PROCESSING,
        aws_conn_id="aws_lake",
        deferrable=True,
    )
    # --8<-- [end:sagemaker_processing]

with DAG(dag_id="docs_ec2_stage", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:ec2_stage]
    SparkBatchInferenceOperator(
        task_id="score",
        model={"name": "digits_cnn", "champion_as_of": "{{ data_interval_start | ds }}"},
        input=PINNED,
        input_filter=[["ds", "=", "{{ data_interval_start | ds }}"]],
        table_uri="s3://my-lake/lake/digit_predictions",
        partition={"ds": "{{ data_interval_start | ds }}"},
        scoring={"feature_columns": ["features"], "key_columns": ["source_file"]},
        engine="ec2",
        engine_options={
            "staging_uri": "s3://my-lake/dltrain-staging",
            "instance_type": "r6i.2xlarge",  # Spark local[*] on all its cores
            "ami_parameter": "/my/org/ami/dltrain-spark",  # Java, pyspark, deltalake, mlflow, torch
            "instance_profile": "DltrainStageNode",
            "subnet_id": "subnet-0abc",
            "max_minutes": 90,
        },
        aws_conn_id="aws_lake",
        mlflow_conn_id="mlflow_default",
    )
    # --8<-- [end:ec2_stage]

with DAG(dag_id="docs_sagemaker", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:sagemaker]
    trained = TrainModelOperator(
        task_id="train",
        dataset=PINNED,
        train_fn="my_pkg.model:train",
        hparams={"epochs": 12, "seed": 7},
        data_filter=[["ds", "<=", "{{ data_interval_start | ds }}"]],
        backend="sagemaker",
        backend_options={
            "staging_uri": "s3://my-lake/dltrain-staging",
            "role": "arn:aws:iam::123456789012:role/DltrainSageMaker",
            "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/dltrain-train:1.0",
            "instance_type": "ml.g5.xlarge",
            "instance_count": 2,
            "processes_per_host": 1,
            "use_spot": True,
            "max_run_s": 7200,
            "tracking_secret": "dltrain/mlflow",
        },
        aws_conn_id="aws_lake",
        mlflow_conn_id="mlflow_default",  # a tracking server the job can reach
        deferrable=True,
    )
    # --8<-- [end:sagemaker]

with DAG(dag_id="docs_ec2", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:ec2]
    train = TrainModelOperator(
        task_id="train",
        dataset=PINNED,
        train_fn="my_models.digits:train",
        hparams={"epochs": 12, "batch_size": 64, "seed": 7},
        backend="ec2",
        backend_options={
            "staging_uri": "s3://my-lake/dltrain-staging",
            "instance_type": "g5.xlarge",
            "instance_count": 2,
            "ami_parameter": "/my/org/ami/dltrain-train",  # an AMI with torch, deltalake, mlflow
            "instance_profile": "DltrainTrainingNode",
            "subnet_id": "subnet-0abc",
            "security_group_ids": ["sg-0cluster"],
            "max_minutes": 180,
            "tracking_secret": "dltrain/mlflow",
        },
        aws_conn_id="aws_lake",
    )
    train >> Ec2ClusterTeardownOperator(
        task_id="ec2_teardown", train_task_id="train", aws_conn_id="aws_lake"
    ).as_teardown(setups=train)
    # --8<-- [end:ec2]

with DAG(dag_id="docs_ray", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # --8<-- [start:ray]
    train = TrainModelOperator(
        task_id="train",
        dataset=PINNED,
        train_fn="my_models.digits:train",
        hparams={"epochs": 12, "batch_size": 64, "seed": 7},
        backend="ray",
        backend_options={
            "address": "http://ray-head:8265",
            "staging_uri": "s3://my-lake/dltrain-staging",
            "num_workers": 4,
            "use_gpu": True,
        },
        deferrable=True,
        aws_conn_id="aws_lake",  # for an s3:// staging_uri and s3:// tables
    )
    # --8<-- [end:ray]

with DAG(dag_id="docs_reap", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    ingest = SparkToDeltaOperator(task_id="ingest", **COMMON, inputs=INPUTS, engine="emr", engine_options=EMR)
    score = TrainModelOperator(task_id="score", dataset=PINNED, train_fn="my_pkg.model:train")
    # --8<-- [start:reap]
    reap = DltrainReapOperator(task_id="reap", aws_conn_id="aws_default", older_than="1h")
    ingest >> score >> reap.as_teardown()
    # --8<-- [end:reap]
