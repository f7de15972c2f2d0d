package io.sparkglass.sampling;

import java.util.concurrent.atomic.LongAdder;

/**
 * Errors the tap swallowed in this JVM (forward-first: sampling never fails a task, but a
 * swallowed error must still be visible). Only the error path touches the adder, so the
 * per-row cost of an idle or healthy tap is unchanged.
 */
public final class TapErrors {
  private static final LongAdder ERRORS = new LongAdder();
  private static volatile String last;

  private TapErrors() {}

  /** Counts one swallowed error and keeps its description for diagnostics. */
  public static void record(Throwable e) {
    ERRORS.increment();
    try {
      last = String.valueOf(e);
    } catch (Throwable ignored) {
      // a failing toString must not escape the error path either
    }
  }

  /** Swallowed errors in this JVM since it started. */
  public static long count() {
    return ERRORS.sum();
  }

  /** The last swallowed error as text, or null. */
  public static String last() {
    return last;
  }
}
