package io.sparkglass.sampling;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/** Registers a tap's gate and capture UDFs in a session (called from Python). */
public final class TapUdfs {
  private TapUdfs() {}

  /**
   * Registers {@code gateName()} and {@code captureName(struct)} for tap {@code tapKey}, both
   * nondeterministic so the optimizer never folds, reorders or deduplicates them.
   */
  public static void register(SparkSession spark, String tapKey, String gateName,
      String captureName) {
    UserDefinedFunction gate =
        functions.udf(new GateUdf(tapKey), DataTypes.BooleanType).asNondeterministic();
    spark.udf().register(gateName, gate);
    registerCapture(spark, tapKey, captureName);
  }

  /**
   * Registers only {@code captureName(struct)} for tap {@code tapKey} (nondeterministic): the
   * capture behind a gate registered elsewhere ({@code io.sparkglass.extensions.NativeGates}).
   */
  public static void registerCapture(SparkSession spark, String tapKey, String captureName) {
    UserDefinedFunction capture =
        functions.udf(new CaptureUdf(tapKey), DataTypes.BooleanType).asNondeterministic();
    spark.udf().register(captureName, capture);
  }

  /** Taps in this JVM with an active round (diagnostics and tests; local mode shares the JVM). */
  public static int activeTaps() {
    return VertexTap.activeCount();
  }
}
