package io.sparkglass.quality;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.util.AccumulatorContext;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Builds a vertex's {@link ExpectationCounter} as a {@link Column} (called from Python:
 * {@code runtime/quality.py}). Nothing goes into the session's function registry, so a query
 * cannot call a counter by name, and a counter lives as long as the plans holding it.
 */
public final class ExpectationCounters {
  private ExpectationCounters() {}

  /**
   * A new tally of {@code expectations} expectations, registered with the session's
   * SparkContext (unnamed: not shown in the UI). Throws when the session is not a classic one
   * (Spark Connect): the caller then counts with {@code observe}.
   */
  public static ExpectationTally tally(SparkSession spark, int expectations) {
    org.apache.spark.sql.classic.SparkSession classic =
        (org.apache.spark.sql.classic.SparkSession) spark;
    ExpectationTally tally = new ExpectationTally(expectations);
    classic.sparkContext().register(tally);
    return tally;
  }

  /**
   * {@code sg_expect_count(conditions...)} counting into {@code tally}: a column to filter on
   * (always true). {@code conditions}: one boolean column per expectation, in the tally's order.
   */
  public static Column counter(SparkSession spark, List<Column> conditions,
      ExpectationTally tally) {
    org.apache.spark.sql.classic.SparkSession classic =
        (org.apache.spark.sql.classic.SparkSession) spark;
    List<Expression> children = new ArrayList<>();
    for (Column c : conditions) {
      children.add(classic.expression(c));
    }
    return ExpressionUtils.column(
        new ExpectationCounter(CollectionConverters.asScala(children).toList(), tally));
  }

  /** Unregisters {@code tally} from the driver (the pipeline stopped: nothing will take it). */
  public static void release(ExpectationTally tally) {
    if (tally.isRegistered()) {
      AccumulatorContext.remove(tally.id());
    }
  }
}
