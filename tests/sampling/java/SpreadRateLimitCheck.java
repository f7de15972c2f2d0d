package io.sparkglass.sampling;

import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.GenericRowWithSchema;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Run by test_spread_rate_limit.py against the sampling jar: one partition's rate limit on a
 * burst of rows (all within the same few milliseconds, as a micro-batch's task passes them). The
 * records kept are spread over the whole burst, not its first rows; they stay within the round's
 * allowance (max-sample-rate × (window + 1 s)); and every row is accounted for: kept, dropped
 * by the rate limit, or dropped by contention. Prints "ok" or exits 1 with what failed.
 */
public final class SpreadRateLimitCheck {
  private SpreadRateLimitCheck() {}

  /** A rendering budget of 1000 s per second, in ms. */
  static final int NO_BUDGET = 1_000_000;

  static void check(boolean ok, String what) {
    if (!ok) {
      System.out.println("FAILED: " + what);
      System.exit(1);
    }
  }

  /** Passes {@code rows} rows (field i = 0, 1, ...) through a fresh round's partition 0. */
  static Map<String, Object> burst(int maxRate, long windowMs, int budgetMs, int rows) {
    VertexTap tap = VertexTap.forKey("spread-check-" + maxRate + "-" + rows);
    ActiveRound round = new ActiveRound("r", tap, System.nanoTime() + 60_000_000_000L, maxRate,
        10_000, budgetMs, null, windowMs);
    PartitionSampler sampler = round.samplerFor(0);
    StructType schema = new StructType().add("i", DataTypes.IntegerType);
    for (int i = 0; i < rows; i++) {
      if (sampler.admit(CoarseClock.now())) {
        Row row = new GenericRowWithSchema(new Object[] {i}, schema);
        sampler.capture(row);
      }
    }
    return sampler.drain(new long[] {ActiveRound.MAX_REPORT_CHARS});
  }

  static int[] kept(Map<String, Object> report) {
    List<?> records = (List<?>) report.get(Messages.RECORDS);
    int[] out = new int[records.size()];
    for (int k = 0; k < out.length; k++) {
      String data = (String) ((Map<?, ?>) records.get(k)).get(Messages.DATA);
      out[k] = Integer.parseInt(data.replaceAll("[^0-9]", ""));
    }
    return out;
  }

  /** The first row, then one every {@code stride} rows up to the end of the burst. */
  static void evenlySpread(int[] kept, int rows) {
    check(kept[0] == 0, "the first kept row is " + kept[0]);
    int stride = kept[1] - kept[0];
    for (int k = 1; k < kept.length; k++) {
      check(kept[k] - kept[k - 1] == stride,
          "uneven spacing at " + k + ": " + kept[k - 1] + " then " + kept[k]);
    }
    check(kept[kept.length - 1] >= rows - stride, "the last kept row is " + kept[kept.length - 1]);
  }

  static long count(Map<String, Object> report, String key) {
    return ((Number) report.get(key)).longValue();
  }

  public static void main(String[] args) {
    // The defaults: 100 records/s per subtask, a 3 s window: 400 records at most. A rendering
    // budget no render can use up (a cold JVM's first row.json() can take a second on a loaded
    // machine), so that only the rate limit decides here.
    int rows = 20_000;
    Map<String, Object> report = burst(100, 3_000, NO_BUDGET, rows);
    int[] kept = kept(report);
    check(ActiveRound.allowance(100, 3_000) == 400, "allowance " + ActiveRound.allowance(100, 3_000));
    check(kept.length >= 200 && kept.length <= 400, "kept " + kept.length + " of a 400 allowance");
    long rate = count(report, Messages.DROPPED_RATE);
    long contention = count(report, Messages.DROPPED_CONTENTION);
    check(kept.length + rate + contention == rows,
        "accounted: kept " + kept.length + " + rate " + rate + " + contention " + contention
            + " != " + rows);
    check(contention == 0, "contention " + contention);
    evenlySpread(kept, rows);

    // Fewer rows than the allowance: every one is kept, none dropped.
    Map<String, Object> few = burst(100, 3_000, NO_BUDGET, 300);
    check(kept(few).length == 300 && count(few, Messages.DROPPED_RATE) == 0,
        "a burst within the allowance: kept " + kept(few).length);

    // A small limit (5/s, 2 s window: 15 at most), as the Spark tests set it.
    Map<String, Object> small = burst(5, 2_000, NO_BUDGET, 1_000);
    int[] smallKept = kept(small);
    check(smallKept.length >= 7 && smallKept.length <= 15, "small limit kept " + smallKept.length);
    evenlySpread(smallKept, 1_000);
    check(smallKept.length + count(small, Messages.DROPPED_RATE) == 1_000, "small limit counts");

    // An allowance above the 1000-record buffer: the buffer fills and stops (a cap, counted
    // as contention), as before.
    Map<String, Object> capped = burst(10_000, 5_000, NO_BUDGET, 3_000);
    check(kept(capped).length == PartitionSampler.MAX_RECORDS, "capped kept " + kept(capped).length);
    check(count(capped, Messages.DROPPED_CONTENTION) == 2_000
        && count(capped, Messages.DROPPED_RATE) == 0, "capped counts");
    System.out.println("ok");
  }
}
