package io.sparkglass.sampling;

import org.apache.spark.sql.api.java.UDF0;

/**
 * {@code sg_gate_N()}: true when the current row should be captured. Idle cost: one field
 * read and one volatile read. Never throws (a failing gate just says false).
 */
public final class GateUdf implements UDF0<Boolean> {
  private static final long serialVersionUID = 1L;
  private final String tapKey;
  private transient VertexTap tap;

  public GateUdf(String tapKey) {
    this.tapKey = tapKey;
  }

  @Override
  public Boolean call() {
    try {
      VertexTap t = tap;
      if (t == null) {
        t = VertexTap.forKey(tapKey);
        tap = t;
      }
      ActiveRound r = t.round;
      if (r == null) {
        return Boolean.FALSE;
      }
      if (!r.admit()) {
        return Boolean.FALSE;
      }
      // The capture that follows in this thread keeps the row for this round, even if the
      // round closes in between (its report waits for the row: ActiveRound.drain).
      ActiveRound.ADMITTED.set(r);
      return Boolean.TRUE;
    } catch (Throwable e) {
      TapErrors.record(e);
      return Boolean.FALSE;
    }
  }
}
