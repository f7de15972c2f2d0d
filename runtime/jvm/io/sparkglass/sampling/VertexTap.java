package io.sparkglass.sampling;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The executor-side tap at one vertex output: idle while {@link #round} is null.
 *
 * <p>Taps live in a per-JVM registry keyed by the tap key the driver chose, because the UDF
 * objects are deserialized per task and must find the same state.
 */
final class VertexTap {
  private static final Map<String, VertexTap> REGISTRY = new ConcurrentHashMap<>();

  final String key;
  /** The active round, or null when idle: the only thing an idle gate reads. */
  volatile ActiveRound round;
  /** What a code-generated gate reads: {@code slot.active} mirrors {@code round != null}. */
  final TapSlot slot;

  private VertexTap(String key) {
    this.key = key;
    this.slot = new TapSlot(this);
  }

  static VertexTap forKey(String key) {
    return REGISTRY.computeIfAbsent(key, VertexTap::new);
  }

  /** Taps of this JVM with a round active now (0 once every round closed itself). */
  static int activeCount() {
    int n = 0;
    for (VertexTap t : REGISTRY.values()) {
      if (t.round != null) {
        n++;
      }
    }
    return n;
  }

  synchronized void begin(ActiveRound r) {
    round = r;
    slot.active = r != null;
  }

  /** Stops admitting rows for {@code r} if it is still the active round. */
  synchronized void end(ActiveRound r) {
    if (round == r) {
      round = null;
      slot.active = false;
    }
  }
}
