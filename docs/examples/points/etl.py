def to_features(spark, inputs, params):
    from pyspark.sql import functions as F

    raw = inputs["raw"]
    return raw.select(
        F.col("id").cast("long").alias("id"),
        F.array(F.col("x1").cast("float"), F.col("x2").cast("float")).alias("features"),
        F.col("label").cast("long").alias("label"),
    )
