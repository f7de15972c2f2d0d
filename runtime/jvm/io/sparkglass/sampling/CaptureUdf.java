package io.sparkglass.sampling;

import org.apache.spark.sql.api.java.UDF1;

/**
 * {@code sg_capture_N(to_json(struct(*)))}: keeps a row the gate admitted. Always returns
 * true so the row continues downstream (forward-first); never throws.
 */
public final class CaptureUdf implements UDF1<String, Boolean> {
  private static final long serialVersionUID = 1L;
  private final String tapKey;

  public CaptureUdf(String tapKey) {
    this.tapKey = tapKey;
  }

  @Override
  public Boolean call(String json) {
    try {
      ActiveRound r = VertexTap.forKey(tapKey).round;
      if (r != null) {
        r.capture(json);
      }
    } catch (Throwable e) {
      // Forward-first: sampling never fails a task.
    }
    return Boolean.TRUE;
  }
}
