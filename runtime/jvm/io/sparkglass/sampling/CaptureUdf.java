package io.sparkglass.sampling;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;

/**
 * {@code sg_capture_N(struct(...))}: keeps a row the gate admitted, after the round's filter,
 * rendered as its program says (the tap's struct is already redacted). Always returns true so
 * the row continues downstream (forward-first); never throws.
 */
public final class CaptureUdf implements UDF1<Row, Boolean> {
  private static final long serialVersionUID = 1L;
  private final String tapKey;

  public CaptureUdf(String tapKey) {
    this.tapKey = tapKey;
  }

  @Override
  public Boolean call(Row row) {
    try {
      ActiveRound r = ActiveRound.ADMITTED.get();
      if (r != null) {
        ActiveRound.ADMITTED.set(null);
      } else {
        r = VertexTap.forKey(tapKey).round;
      }
      if (r != null) {
        r.capture(row);
      }
    } catch (Throwable e) {
      TapErrors.record(e);
      // Forward-first: sampling never fails a task.
    }
    return Boolean.TRUE;
  }
}
