package io.sparkglass.extensions;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import scala.collection.immutable.Seq;

/**
 * Registers a tap's code-generated gate ({@link NativeTapGate}) by name in one session, as
 * {@code TapUdfs.register} does for the UDF gate: {@code gateName()} takes no argument. For
 * sessions without {@link SamplingExtensions} (called from Python: the DSL's taps use it by
 * default, {@code runtime/sampling/tap.py}).
 */
public final class NativeGates {
  private NativeGates() {}

  /** Registers {@code gateName()} as tap {@code tapKey}'s native gate in {@code spark}. */
  public static void register(SparkSession spark, String tapKey, String gateName) {
    registry(spark).createOrReplaceTempFunction(gateName,
        (Seq<Expression> args) -> {
          if (!args.isEmpty()) {
            throw new IllegalArgumentException(gateName + "() takes no argument");
          }
          return new NativeTapGate(tapKey);
        }, "java_udf");
  }

  /**
   * Registers tap {@code tapKey}'s native gate {@code gateName()} and its capture
   * {@code captureName(struct)} in {@code spark}: the pair the DSL's tap condition calls. The
   * capture is the {@code CaptureUdf} behind a {@link TapCapture}, so its code stays out of
   * the stage's generated method. Throws when the session cannot take the native gate (not a
   * classic session); the caller then registers the UDF pair ({@code TapUdfs.register}) under
   * the same names.
   */
  public static void registerTap(SparkSession spark, String tapKey, String gateName,
      String captureName) {
    register(spark, tapKey, gateName);
    registry(spark).createOrReplaceTempFunction(captureName,
        (Seq<Expression> args) -> {
          if (args.size() != 1) {
            throw new IllegalArgumentException(captureName + "(row) takes one argument");
          }
          return new TapCapture(TapFunctions.capture(tapKey, captureName, args.head()));
        }, "scala_udf");
  }

  private static org.apache.spark.sql.catalyst.analysis.FunctionRegistry registry(
      SparkSession spark) {
    return ((org.apache.spark.sql.classic.SparkSession) spark).sessionState().functionRegistry();
  }
}
