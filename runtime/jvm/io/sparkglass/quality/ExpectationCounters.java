package io.sparkglass.quality;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import scala.collection.immutable.Seq;

/**
 * Registers a vertex's {@link ExpectationCounter} by name in one session (called from Python:
 * {@code runtime/quality.py}), with a new {@link ExpectationTally} registered with the
 * session's SparkContext.
 */
public final class ExpectationCounters {
  private ExpectationCounters() {}

  /**
   * Registers {@code functionName(pass_1, ..., pass_n)} counting {@code expectations}
   * expectations, and returns the tally it counts into. Throws when the session is not a
   * classic one (Spark Connect): the caller then counts with {@code observe}.
   */
  public static ExpectationTally register(SparkSession spark, String functionName,
      int expectations) {
    org.apache.spark.sql.classic.SparkSession classic =
        (org.apache.spark.sql.classic.SparkSession) spark;
    ExpectationTally tally = new ExpectationTally(expectations);
    classic.sparkContext().register(tally);
    classic.sessionState().functionRegistry().createOrReplaceTempFunction(functionName,
        (Seq<Expression> args) -> new ExpectationCounter(args, tally), "java_udf");
    return tally;
  }
}
