package io.sparkglass.extensions;

import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Taps the extension placed with the {@code GateUdf} because building the native gate failed
 * (sampling never fails a query). Counted here; logged once per JVM, the first time.
 */
public final class NativeGateFallbacks {
  private static final Logger LOG = LoggerFactory.getLogger(NativeGateFallbacks.class);
  private static final AtomicLong COUNT = new AtomicLong();

  private NativeGateFallbacks() {}

  static void record(Throwable e) {
    if (COUNT.incrementAndGet() == 1) {
      LOG.warn("sparkglass: the native tap gate could not be built ({}); taps use the UDF gate"
          + " instead (spark.sparkglass.sampling.nativeGate=false does so on purpose)",
          String.valueOf(e));
    }
  }

  /** Taps placed with the UDF gate after the native gate failed, in this JVM. */
  public static long count() {
    return COUNT.get();
  }
}
